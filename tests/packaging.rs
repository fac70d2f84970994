//! What a user installing toolwire gets: the licence stated everywhere
//! alike, the Rust version it needs, shell completions that complete, man
//! pages that render.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const BIN: &str = env!("CARGO_BIN_EXE_toolwire");

fn run(cmd: &mut Command, install: &str) -> Output {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}; install it with `{install}`"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The packages that build on this machine: `cargo build` downloads only
/// those (not, say, the wasm-only dependencies of the HTTP client), so
/// asking offline for every platform's would fail on a fresh checkout.
fn metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = text(&run(Command::new(rustc).arg("-vV"), "rustup (rustc)"));
    let host = version
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names its host");
    let out = run(
        Command::new(cargo)
            .args(["metadata", "--format-version", "1", "--locked", "--offline"])
            .args(["--filter-platform", host])
            .current_dir(ROOT),
        "rustup (cargo)",
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn version(v: &str) -> Vec<u64> {
    v.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

/// Only one toolchain exists where this runs, so the declared
/// `rust-version` is checked in parts: std APIs by clippy's
/// `incompatible_msrv` lint (CI runs clippy with `-D warnings`), and here
/// every dependency's own declared `rust-version`, which would refuse to
/// build on an older compiler.
#[test]
fn every_dependency_builds_with_our_rust_version() {
    let meta = metadata();
    let packages = meta["packages"].as_array().unwrap();
    let ours = packages
        .iter()
        .find(|p| p["name"] == "toolwire")
        .and_then(|p| p["rust_version"].as_str())
        .expect("Cargo.toml declares rust-version");
    let newer: Vec<String> = packages
        .iter()
        .filter_map(|p| Some((p["name"].as_str()?, p["rust_version"].as_str()?)))
        .filter(|(_, v)| version(v) > version(ours))
        .map(|(name, v)| format!("{name} needs {v}"))
        .collect();
    assert!(
        newer.is_empty(),
        "rust-version = {ours:?} in Cargo.toml, but {newer:?}: raise it or pin older versions"
    );
}

#[test]
fn the_package_is_described_and_the_licence_is_mit_everywhere() {
    let meta = metadata();
    let package = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "toolwire")
        .unwrap()
        .clone();
    for field in ["description", "license", "readme", "rust_version"] {
        assert!(package[field].is_string(), "Cargo.toml lacks {field}");
    }
    assert_eq!(package["license"], "MIT");
    assert!(!package["keywords"].as_array().unwrap().is_empty());
    assert!(!package["categories"].as_array().unwrap().is_empty());
    let licence = std::fs::read_to_string(Path::new(ROOT).join("LICENSE")).unwrap();
    assert_eq!(licence.lines().next(), Some("MIT License"));
    let npm: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(ROOT).join("editors/typescript/package.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(npm["license"], "MIT");
    let pyproject =
        std::fs::read_to_string(Path::new(ROOT).join("editors/python/pyproject.toml")).unwrap();
    assert!(pyproject.contains("license = \"MIT\""), "{pyproject}");
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    assert!(readme.contains("MIT licence"), "README states the licence");
}

/// The commands `toolwire --help` lists, and the long flags of each.
fn commands() -> Vec<(String, Vec<String>)> {
    let listed = |help: &str, section: &str| -> Vec<String> {
        help.split(section)
            .nth(1)
            .unwrap_or_default()
            .lines()
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .collect()
    };
    let help = text(&run(Command::new(BIN).arg("--help"), "cargo build"));
    listed(&help, "Commands:")
        .into_iter()
        .filter(|c| c != "help")
        .map(|c| {
            let help = text(&run(Command::new(BIN).args([&c, "--help"]), "cargo build"));
            // Option lines: `  -x, --long <VALUE>  description`.
            let flags = help
                .lines()
                .map(str::trim_start)
                .filter(|l| l.starts_with('-'))
                .filter_map(|l| l.split("  ").next())
                .flat_map(str::split_whitespace)
                .filter(|w| w.starts_with("--") && w.len() > 2)
                .map(|w| w.trim_end_matches(',').to_owned())
                .filter(|w| w != "--help" && w != "--version")
                .collect();
            (c, flags)
        })
        .collect()
}

#[test]
fn shell_completions_complete_commands_and_flags() {
    let cmds = commands();
    assert!(cmds.len() >= 6, "{cmds:?}");
    let home = tempfile::tempdir().unwrap();
    let script = |shell: &str| {
        let path = home.path().join(format!("toolwire.{shell}"));
        let out = run(
            Command::new(BIN).args(["completions", shell]),
            "cargo build",
        );
        std::fs::write(&path, out.stdout).unwrap();
        path
    };

    // bash: the completion function itself, as readline would call it.
    let bash = script("bash");
    let complete_bash = |words: &str| {
        let program = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
             _toolwire toolwire \"${{COMP_WORDS[-1]}}\" \"${{COMP_WORDS[-2]}}\"; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            bash.display()
        );
        text(&run(
            Command::new("bash").args(["-c", &program]),
            "apt-get install bash",
        ))
    };
    let all = complete_bash("toolwire ''");
    for (cmd, flags) in &cmds {
        assert!(all.lines().any(|l| l == cmd), "bash misses {cmd}: {all}");
        let offered = complete_bash(&format!("toolwire {cmd} --"));
        for flag in flags {
            assert!(
                offered.lines().any(|l| l == flag),
                "bash misses {cmd} {flag}: {offered}"
            );
        }
    }

    // fish: `complete -C` asks fish for the completions of a command line.
    let fish = script("fish");
    let out = run(
        Command::new("fish")
            .args(["--no-config", "-c"])
            .arg(format!(
                "source {}; complete -C 'toolwire '",
                fish.display()
            ))
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path())
            .env("XDG_DATA_HOME", home.path()),
        "apt-get install fish",
    );
    let offered = text(&out);
    for (cmd, _) in &cmds {
        assert!(
            offered.lines().any(|l| l.split('\t').next() == Some(cmd)),
            "fish misses {cmd}: {offered}"
        );
    }

    // zsh: its completion system needs an interactive shell; check that the
    // script parses and defines the completion function.
    let zsh = script("zsh");
    run(
        Command::new("zsh").arg("-n").arg(&zsh),
        "apt-get install zsh",
    );
    let defined = std::fs::read_to_string(&zsh).unwrap();
    assert!(defined.starts_with("#compdef toolwire"), "{defined}");
}

#[test]
fn man_pages_render_cleanly_and_document_every_command_and_flag() {
    let dir = tempfile::tempdir().unwrap();
    run(
        Command::new(BIN).arg("man").arg("--out").arg(dir.path()),
        "cargo build",
    );
    let render = |page: &Path| {
        let out = run(
            Command::new("groff")
                .args(["-man", "-Tascii", "-ww"])
                .arg(page),
            "apt-get install groff-base",
        );
        assert!(
            out.stderr.is_empty(),
            "{}: {}",
            page.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        // Undo groff's overstriking (bold, underline) to read the words.
        let mut plain = String::new();
        for ch in text(&out).chars() {
            if ch == '\u{8}' {
                plain.pop();
            } else {
                plain.push(ch);
            }
        }
        plain
    };
    let main = render(&dir.path().join("toolwire.1"));
    for (cmd, flags) in commands() {
        assert!(
            main.contains(&format!("toolwire-{cmd}(1)")),
            "toolwire(1) misses {cmd}"
        );
        let page = render(&dir.path().join(format!("toolwire-{cmd}.1")));
        for flag in flags {
            assert!(
                page.contains(&flag),
                "toolwire-{cmd}(1) misses {flag}:\n{page}"
            );
        }
    }
    // Without --out, toolwire(1) goes to stdout.
    let out = run(Command::new(BIN).arg("man"), "cargo build");
    assert!(text(&out).contains(".TH toolwire 1"));
}
