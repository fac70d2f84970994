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

/// Cargo's version: the one number every package and client says
/// (docs/cli.md, "Versions").
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn json(path: &str) -> Value {
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn one_version_in_cargo_the_npm_packages_and_the_clients() {
    let mut said = vec![(
        "toolwire --version".to_owned(),
        text(&run(Command::new(BIN).arg("--version"), "cargo build"))
            .trim()
            .strip_prefix("toolwire ")
            .unwrap_or_default()
            .to_owned(),
    )];
    let launcher = json("packaging/npm/toolwire/package.json");
    said.push((
        "the npm launcher".into(),
        launcher["version"].as_str().unwrap().into(),
    ));
    let platforms = launcher["optionalDependencies"].as_object().unwrap();
    assert!(platforms.contains_key("toolwire-linux-x64"), "{launcher}");
    for (name, version) in platforms {
        said.push((
            format!("the launcher's {name}"),
            version.as_str().unwrap().into(),
        ));
    }
    for path in [
        "editors/typescript/package.json",
        "editors/vscode/package.json",
    ] {
        said.push((path.into(), json(path)["version"].as_str().unwrap().into()));
    }
    let lock = json("editors/typescript/package-lock.json");
    said.push((
        "editors/typescript/package-lock.json".into(),
        lock["packages"][""]["version"].as_str().unwrap().into(),
    ));
    let pyproject: toml::Table = read("editors/python/pyproject.toml").parse().unwrap();
    said.push((
        "editors/python/pyproject.toml".into(),
        pyproject["project"]["version"].as_str().unwrap().into(),
    ));
    // The version each client reports in `clientInfo`.
    for (path, line) in [
        (
            "editors/typescript/src/client.ts",
            "export const CLIENT_VERSION = ",
        ),
        (
            "editors/python/toolwire_client/_wire.py",
            "CLIENT_VERSION = ",
        ),
    ] {
        let constant = read(path)
            .lines()
            .find_map(|l| l.strip_prefix(line))
            .unwrap_or_else(|| panic!("{path} has no `{line}`"))
            .trim_matches(|c| c == '"' || c == ';')
            .to_owned();
        said.push((path.into(), constant));
    }
    let wrong: Vec<_> = said.iter().filter(|(_, v)| v != VERSION).collect();
    assert!(wrong.is_empty(), "Cargo.toml says {VERSION}, but {wrong:?}");
}

/// `packaging/package.py --only <kind>` around the binary cargo built for
/// this test run (the scripts default to a release build; packaging the
/// test profile's binary checks the same packaging without a second,
/// several-minute compile). Returns the files it wrote.
fn package(kind: &str, out: &Path) -> Vec<std::path::PathBuf> {
    let made = run(
        Command::new("python3")
            .arg(Path::new(ROOT).join("packaging/package.py"))
            .args(["--binary", BIN, "--only", kind, "--out"])
            .arg(out),
        "apt-get install python3 npm",
    );
    text(&made).lines().map(Into::into).collect()
}

/// A `toolwire` that is not the packaged one, first on PATH: a client that
/// runs it has looked at PATH before the package it was installed with.
fn decoy_path(dir: &Path) -> std::ffi::OsString {
    let bin = dir.join("decoy");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(
        bin.join("toolwire"),
        "#!/bin/sh\necho 'the toolwire on PATH ran' >&2\nexit 97\n",
    )
    .unwrap();
    run(
        Command::new("chmod").arg("+x").arg(bin.join("toolwire")),
        "coreutils",
    );
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(&path))).unwrap()
}

/// The installed `toolwire` command runs: `--version`, the bundled
/// `replay` (which starts `toolwire serve` from the same install), `proxy
/// --help`.
fn runs_as_packaged(command: &Path, dir: &Path) {
    let version = text(&run(Command::new(command).arg("--version"), "the package"));
    assert_eq!(version.trim(), format!("toolwire {VERSION}"));
    let replay = text(&run(
        Command::new(command).arg("replay").current_dir(dir),
        "the package",
    ));
    assert!(replay.contains("results persisted"), "{replay}");
    let help = text(&run(
        Command::new(command).args(["proxy", "--help"]),
        "the package",
    ));
    assert!(help.contains("Usage: toolwire proxy"), "{help}");
}

/// `installed` is, byte for byte, the binary that was packaged.
fn is_the_packaged_binary(installed: &Path) {
    let same = std::fs::read(installed).ok() == std::fs::read(BIN).ok();
    assert!(same, "{} is not {BIN}", installed.display());
}

#[test]
fn the_wheel_installs_in_a_fresh_venv_and_the_python_client_runs_its_binary() {
    let tmp = tempfile::tempdir().unwrap();
    let built = package("wheel", &tmp.path().join("dist"));
    let [wheel] = built.as_slice() else {
        panic!("{built:?}")
    };
    let name = wheel.file_name().unwrap().to_str().unwrap();
    let tag = name
        .strip_prefix(&format!("toolwire-{VERSION}-py3-none-"))
        .and_then(|t| t.strip_suffix(".whl"))
        .unwrap_or_else(|| panic!("{name}"));
    assert!(
        tag.starts_with("manylinux_2_") && tag.ends_with("_x86_64"),
        "{tag}"
    );

    // auditwheel reads the binary's needs itself and must arrive at the
    // same tag: the wheel claims no system its binary would not start on.
    let auditwheel = Path::new(ROOT).join("tests/packaging/.venv/bin/auditwheel");
    let show = text(&run(
        Command::new(&auditwheel).arg("show").arg(wheel),
        "tests/setup.d/60-packaging.sh",
    ));
    let show = show.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        show.contains(&format!(
            "is consistent with the following platform tag: \"{tag}\""
        )),
        "{show}"
    );

    let venv = tmp.path().join("venv");
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        "apt-get install python3-venv",
    );
    let pip = |args: &[&std::ffi::OsStr]| {
        run(
            Command::new(venv.join("bin/python"))
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                ])
                .args(args),
            "apt-get install python3-venv",
        )
    };
    // The wheel needs nothing from an index.
    pip(&["--no-index".as_ref(), wheel.as_os_str()]);
    let installed = venv.join("bin/toolwire");
    is_the_packaged_binary(&installed);
    runs_as_packaged(&installed, tmp.path());

    // The Python client, from its own wheel, in the same venv, with another
    // toolwire first on PATH, runs the one pip installed beside it.
    let client_dist = tmp.path().join("client");
    run(
        Command::new(Path::new(ROOT).join("editors/python/.venv/bin/python"))
            .args(["-m", "build", "--wheel", "--outdir"])
            .arg(&client_dist)
            .arg(Path::new(ROOT).join("editors/python"))
            .stdout(Stdio::null()),
        "editors/install.sh",
    );
    let client = std::fs::read_dir(&client_dist)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    pip(&[client.as_os_str()]);
    let script = "import tempfile\n\
        from toolwire_client import ToolwireClient, locate_toolwire\n\
        print(locate_toolwire())\n\
        with tempfile.TemporaryDirectory() as root:\n\
        \x20   client = ToolwireClient.start(root, shared=False)\n\
        \x20   print(client.initialize_result.server_info.version)\n\
        \x20   client.close()\n";
    let out = run(
        Command::new(venv.join("bin/python"))
            .args(["-c", script])
            .env("PATH", decoy_path(tmp.path()))
            .env_remove("TOOLWIRE_BIN")
            .current_dir(tmp.path()),
        "the python client",
    );
    assert_eq!(text(&out), format!("{}\n{VERSION}\n", installed.display()));
}

/// How `command serve` ends when SIGTERM reaches the process that was
/// started, once it has answered `initialize` (so the binary is running).
fn terminated(command: &Path, root: &Path) -> std::process::ExitStatus {
    use std::io::{BufRead, Read, Write};
    let mut child = Command::new(command)
        .arg("serve")
        .current_dir(root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"processId": null, "rootUri": url::Url::from_directory_path(root).unwrap().as_str()},
    })
    .to_string();
    let mut stdin = child.stdin.take().unwrap();
    write!(stdin, "Content-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    let mut reply = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut length = 0;
    loop {
        let mut line = String::new();
        reply.read_line(&mut line).unwrap();
        if let Some(n) = line.strip_prefix("Content-Length: ") {
            length = n.trim().parse().unwrap();
        }
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    let mut answer = vec![0; length];
    reply.read_exact(&mut answer).unwrap();
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(
        answer["result"]["serverInfo"]["version"], VERSION,
        "{answer}"
    );
    // The processes it started (the launcher's binary), to see them end too.
    let tasks = std::fs::read_dir(format!("/proc/{}/task", child.id())).unwrap();
    let started: Vec<i32> = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .map(|p| p.parse().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    // SAFETY: kill(2) on the pid of a child not yet waited for.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let status = child.wait().unwrap();
    // Node reaps the binary before it exits: a pid still there was orphaned.
    let left: Vec<_> = started
        .into_iter()
        .filter(|pid| Path::new(&format!("/proc/{pid}")).exists())
        .collect();
    for pid in &left {
        // SAFETY: kill(2); the test fails below in any case.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(
        left.is_empty(),
        "{} left {left:?} running",
        command.display()
    );
    drop(stdin);
    status
}

#[test]
fn the_npm_packages_install_globally_and_the_typescript_client_runs_their_binary() {
    let tmp = tempfile::tempdir().unwrap();
    let built = package("npm", &tmp.path().join("dist"));
    let [platform, launcher] = built.as_slice() else {
        panic!("{built:?}")
    };
    assert_eq!(
        platform.file_name().unwrap().to_str(),
        Some(&*format!("toolwire-linux-x64-{VERSION}.tgz"))
    );
    assert_eq!(
        launcher.file_name().unwrap().to_str(),
        Some(&*format!("toolwire-{VERSION}.tgz"))
    );
    let manifest = |tgz: &Path| -> Value {
        let out = run(
            Command::new("tar")
                .arg("-xOzf")
                .arg(tgz)
                .arg("package/package.json"),
            "apt-get install tar",
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    // npm installs the platform package only where it runs (os, cpu, libc)
    // and only through the launcher's optional dependency on it.
    let p = manifest(platform);
    assert_eq!(
        (&p["version"], &p["os"], &p["cpu"], &p["libc"], &p["bin"]),
        (
            &Value::from(VERSION),
            &serde_json::json!(["linux"]),
            &serde_json::json!(["x64"]),
            &serde_json::json!(["glibc"]),
            &Value::Null
        ),
        "{p}"
    );
    let l = manifest(launcher);
    assert_eq!(
        l["optionalDependencies"]["toolwire-linux-x64"], VERSION,
        "{l}"
    );
    assert_eq!(l["bin"]["toolwire"], "bin/toolwire.js", "{l}");

    let npm = |dir: &Path, args: &[&str], files: &[&Path]| {
        run(
            Command::new("npm")
                .args(args)
                .args(["--no-audit", "--no-fund", "--loglevel=error"])
                .args(files)
                .current_dir(dir),
            "apt-get install npm",
        )
    };
    // A fresh global prefix, as `npm install -g toolwire` makes one; offline,
    // so nothing of ours can come from a registry.
    let prefix = tmp.path().join("prefix");
    npm(
        tmp.path(),
        &[
            "install",
            "--global",
            "--offline",
            "--prefix",
            prefix.to_str().unwrap(),
        ],
        &[platform, launcher],
    );
    is_the_packaged_binary(&prefix.join("lib/node_modules/toolwire-linux-x64/bin/toolwire"));
    let command = prefix.join("bin/toolwire");
    runs_as_packaged(&command, tmp.path());
    // The launcher exits as the binary does.
    let direct = Command::new(BIN).arg("--no-such-flag").output().unwrap();
    let launched = Command::new(&command)
        .arg("--no-such-flag")
        .output()
        .unwrap();
    assert_eq!(launched.status.code(), direct.status.code());
    assert_eq!(launched.stderr, direct.stderr);
    // A harness stopping `toolwire serve` (or `npx toolwire mcp`) signals the
    // process it started, here the launcher: the binary gets the signal and
    // the launcher ends as the binary does when signalled itself.
    let dir = tmp.path().join("workspace");
    std::fs::create_dir(&dir).unwrap();
    assert_eq!(terminated(&command, &dir), terminated(Path::new(BIN), &dir));

    // A project with the TypeScript client (its `npm pack` tarball) and the
    // toolwire package: the client runs the platform package's binary,
    // though another toolwire is first on PATH.
    let project = tmp.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("package.json"), "{\"private\": true}\n").unwrap();
    let packed = text(&run(
        Command::new("npm")
            .args(["pack", "--silent", "--pack-destination"])
            .arg(tmp.path())
            .current_dir(Path::new(ROOT).join("editors/typescript")),
        "editors/install.sh",
    ));
    let client = tmp.path().join(packed.trim());
    // The client's own dependency (vscode-jsonrpc) may come from the
    // registry; the launcher then offline, its optional dependency already
    // satisfied by the local platform package.
    npm(
        &project,
        &["install", "--prefer-offline"],
        &[&client, platform],
    );
    npm(&project, &["install", "--offline"], &[launcher]);
    let script = "const { ToolwireClient, locateToolwire } = require('toolwire-client');\n\
        const { mkdtempSync, rmSync } = require('node:fs');\n\
        const { join } = require('node:path');\n\
        console.log(locateToolwire());\n\
        const root = mkdtempSync(join(require('node:os').tmpdir(), 'toolwire-npm-'));\n\
        ToolwireClient.start({ root, shared: false }).then(async (client) => {\n\
          console.log(client.initializeResult.serverInfo.version);\n\
          await client.close();\n\
          rmSync(root, { recursive: true });\n\
        });\n";
    let out = run(
        Command::new("node")
            .args(["-e", script])
            .env("PATH", decoy_path(tmp.path()))
            .env_remove("TOOLWIRE_BIN")
            .current_dir(&project),
        "apt-get install nodejs",
    );
    let binary = project.join("node_modules/toolwire-linux-x64/bin/toolwire");
    assert_eq!(text(&out), format!("{}\n{VERSION}\n", binary.display()));
    is_the_packaged_binary(&binary);
    // npx runs the project's launcher.
    let npx = text(&run(
        Command::new("npx")
            .args(["--offline", "toolwire", "--version"])
            .current_dir(&project),
        "apt-get install npm",
    ));
    assert_eq!(npx.trim(), format!("toolwire {VERSION}"));
}

/// A binary needing a library that manylinux systems need not have is not
/// packaged to fail at start there: `package.py` names the library. fish
/// (installed for the completion test) links libtinfo and libpcre2.
#[test]
fn a_binary_needing_other_libraries_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new("python3")
        .arg(Path::new(ROOT).join("packaging/package.py"))
        .args(["--binary", "/usr/bin/fish", "--only", "wheel", "--out"])
        .arg(tmp.path())
        .output()
        .expect("python3");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("libpcre2-32.so.0") && err.contains("libtinfo.so.6"),
        "{err}"
    );
    assert!(std::fs::read_dir(tmp.path()).unwrap().next().is_none());
}
