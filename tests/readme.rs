//! README is the front door: its test command must do what it says on a
//! fresh machine, and every link it and docs/ give must lead somewhere.
//!
//! The package check of `tests/run.sh` is driven with a fake `dpkg-query`
//! (and, for the install path, fake `sudo` and `apt-get`) first on PATH, so
//! a package can be reported missing without removing it from the machine.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every package name the `.ci/apt/*.txt` lists give, as tests/run.sh reads them.
fn wanted_packages() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(Path::new(ROOT).join(".ci/apt")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "txt") {
            for line in read(&path).lines() {
                let line = line.split('#').next().unwrap_or("");
                names.extend(line.split_whitespace().map(str::to_owned));
            }
        }
    }
    names
}

/// A directory of fake commands put first on PATH: `dpkg-query` reports
/// every wanted package installed except `missing`; `cargo` and `apt-get`
/// record that they ran (and how) in `log`; `sudo` runs its command.
struct FakeMachine {
    dir: tempfile::TempDir,
}

impl FakeMachine {
    fn new(missing: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let installed: String = wanted_packages()
            .iter()
            .filter(|p| !missing.contains(&p.as_str()))
            .map(|p| format!("installed {p},\n"))
            .collect();
        // One package that provides another name: a wanted name provided
        // this way counts as installed (nodesource's nodejs provides npm).
        let installed = installed.replace("installed nodejs,", "installed nodejs,npm (= 1)");
        let installed = installed.replace("installed npm,\n", "");
        std::fs::write(dir.path().join("installed"), installed).unwrap();
        let log = dir.path().join("log");
        let script = |name: &str, body: String| {
            use std::os::unix::fs::PermissionsExt;
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        script(
            "dpkg-query",
            format!("cat '{}'", dir.path().join("installed").display()),
        );
        script("cargo", format!("echo \"cargo $*\" >> '{}'", log.display()));
        script(
            "apt-get",
            format!("echo \"apt-get $*\" >> '{}'", log.display()),
        );
        script("sudo", "[ \"$1\" = -n ] && shift; exec \"$@\"".to_owned());
        FakeMachine { dir }
    }

    fn run(&self, env: &[(&str, &str)]) -> Output {
        let path = format!(
            "{}:{}",
            self.dir.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Command::new(Path::new(ROOT).join("tests/run.sh"))
            .env("PATH", path)
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn missing_packages_are_all_named_with_the_command_that_installs_them() {
    let machine = FakeMachine::new(&["fish", "zsh", "postgresql"]);
    let out = machine.run(&[("TOOLWIRE_APT_INSTALL", "no")]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("3 Debian package(s) the tests need are missing: fish postgresql zsh"),
        "{err}"
    );
    assert!(
        err.contains("apt-get update && ")
            && err.contains("apt-get install -y --no-install-recommends fish postgresql zsh\n"),
        "{err}"
    );
    // It stops at once: nothing was built, set up or installed.
    assert_eq!(machine.log(), "", "{err}");
    // npm is provided by the fake nodejs, so it is not reported missing.
    assert!(!err.contains("npm"), "{err}");
}

#[test]
fn missing_packages_are_installed_together_when_it_can() {
    // The fake sudo runs its command whoever we are, so this takes the
    // install path as root and as any user. The fake dpkg-query still
    // reports them missing after apt-get "installed" them, which the script
    // must notice and stop on, before building anything.
    let machine = FakeMachine::new(&["fish", "zsh"]);
    let out = machine.run(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let log = machine.log();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert_eq!(lines[0], "apt-get update -qq");
    assert_eq!(
        lines[1],
        "apt-get install -y --no-install-recommends fish zsh -qq"
    );
    assert!(
        err.contains("apt-get succeeded but these are still not installed: fish zsh"),
        "{err}"
    );
}

#[test]
fn ci_runs_exactly_readmes_test_command() {
    // .ci/run reads line 3 of README's first ```sh block, without its comment.
    let readme = read(&Path::new(ROOT).join("README.md"));
    let block: Vec<&str> = readme
        .lines()
        .skip_while(|l| !l.starts_with("```sh"))
        .collect();
    let line = block.get(2).copied().unwrap_or("");
    let command = line.split('#').next().unwrap_or("").trim();
    assert_eq!(command, "./tests/run.sh");
    let ci = read(&Path::new(ROOT).join(".ci/run"));
    assert!(ci.contains("sed -n 3p"), ".ci/run reads README's line 3");
    assert!(
        !ci.contains("apt-get"),
        ".ci/run must add nothing README's command lacks"
    );
}

/// GitHub's anchor for a heading: lower case, punctuation but `-` and `_`
/// dropped, spaces to hyphens; a repeated heading gets `-1`, `-2`, ...
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut unique = slug.clone();
        let mut n = 0;
        while seen.contains(&unique) {
            n += 1;
            unique = format!("{slug}-{n}");
        }
        seen.insert(unique);
    }
    seen
}

/// The targets of the markdown links `[text](target)` outside code.
fn links(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop inline code spans, which may hold `](` of their own.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            if let Some(end) = rest.find(')') {
                out.push(rest[..end].to_owned());
                rest = &rest[end..];
            }
        }
    }
    out
}

#[test]
fn every_link_in_readme_and_docs_resolves() {
    let mut pages: Vec<PathBuf> = vec![Path::new(ROOT).join("README.md")];
    for entry in std::fs::read_dir(Path::new(ROOT).join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text = read(page);
        for target in links(&text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            checked += 1;
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let resolved = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !resolved.exists() {
                broken.push(format!("{}: {target} (no such file)", page.display()));
                continue;
            }
            if let Some(anchor) = anchor
                && resolved.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&resolved)).contains(anchor)
            {
                broken.push(format!("{}: {target} (no such heading)", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    // README links every page of docs/.
    let readme = read(&Path::new(ROOT).join("README.md"));
    for page in &pages[1..] {
        let name = format!("docs/{}", page.file_name().unwrap().to_string_lossy());
        assert!(
            readme.contains(&format!("]({name}")),
            "README does not link {name}"
        );
    }
    assert!(
        checked > 20,
        "only {checked} links found: is the parser right?"
    );
}

#[test]
fn readme_stays_a_front_door() {
    let readme = read(&Path::new(ROOT).join("README.md"));
    let lines = readme.lines().count();
    assert!(
        lines <= 260,
        "README.md has {lines} lines: move detail into docs/"
    );
    // The Rust version README names is Cargo.toml's.
    let cargo = read(&Path::new(ROOT).join("Cargo.toml"));
    let version = cargo
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap();
    assert!(
        readme.contains(&format!("**Rust {version}** or newer")),
        "README's requirements must name rust-version {version}"
    );
}

/// Where the worked exchange of docs/protocol.md says it ran: the test's
/// temporary workspace is written as this path, with every
/// `Content-Length` recomputed for it.
const EXAMPLE_WORKSPACE: &str = "/home/me/project";
const EXCHANGE_BEGIN: &str = "<!-- exchange: generated by tests/readme.rs, do not edit -->\n";
const EXCHANGE_END: &str = "<!-- exchange: end -->\n";

/// One LSP frame of `body`.
fn lsp_frame(body: &str) -> Vec<u8> {
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// A frame as docs/protocol.md shows it: each `\r\n` of the header written
/// out and ended by a line break, then the body.
fn shown(body: &str) -> String {
    format!("Content-Length: {}\\r\\n\n\\r\\n\n{body}\n", body.len())
}

/// Run the real binary through `initialize`, `initialized` and a small
/// `budget/apply`, and render the exchange as docs/protocol.md shows it.
fn run_exchange() -> String {
    use std::io::{BufReader, Write};
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().canonicalize().unwrap();
    let real = real.to_str().unwrap();
    let place = |text: &str| text.replace(real, EXAMPLE_WORKSPACE);
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .arg("serve")
        .current_dir(real)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut read_reply = || String::from_utf8(common::read_frame_blocking(&mut stdout)).unwrap();
    // A test run's log, long enough that its preview (the header naming
    // the saved file, and 40 characters of it) is shorter than it.
    let log: String = (1..=25).map(|i| format!("test t{i:02} ... ok\n")).collect();
    let requests = [
        (
            "the client starts the session; the workspace is `rootUri`".to_owned(),
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"rootUri":"file://{real}","clientInfo":{{"name":"example"}}}}}}"#
            ),
            true,
        ),
        (
            "a notification: no reply".to_owned(),
            r#"{"jsonrpc":"2.0","method":"initialized","params":{}}"#.to_owned(),
            false,
        ),
        (
            format!(
                "one tool result of {} characters, over this request's `maxResultChars` of 100",
                log.len()
            ),
            serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "budget/apply", "params": {
                "sessionId": "demo",
                "limits": {"maxResultChars": 100, "previewChars": 40},
                "messages": [
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "make"}}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": log}]}
                ]}})
            .to_string(),
            true,
        ),
    ];
    let mut out = String::new();
    for (what, request, replied) in requests {
        stdin.write_all(&lsp_frame(&request)).unwrap();
        stdin.flush().unwrap();
        out.push_str(&format!(
            "Client → server ({what}):\n\n```text\n{}```\n\n",
            shown(&place(&request))
        ));
        if replied {
            let reply = place(&read_reply());
            out.push_str(&format!(
                "Server → client:\n\n```text\n{}```\n\n",
                shown(&reply)
            ));
        }
    }
    drop(stdin);
    let _ = child.wait();
    out
}

/// docs/protocol.md opens with a worked exchange made by the real binary;
/// `TOOLWIRE_UPDATE_DOCS=1 cargo test --test readme` writes it again when
/// the server's answers change.
#[test]
fn protocol_md_opens_with_the_real_binarys_exchange() {
    let path = Path::new(ROOT).join("docs/protocol.md");
    let doc = read(&path);
    let generated = run_exchange();
    let (Some(begin), Some(end)) = (doc.find(EXCHANGE_BEGIN), doc.find(EXCHANGE_END)) else {
        panic!("docs/protocol.md has no generated exchange section");
    };
    let current = &doc[begin + EXCHANGE_BEGIN.len()..end];
    if std::env::var_os("TOOLWIRE_UPDATE_DOCS").is_some() {
        let updated = format!(
            "{}{generated}{}",
            &doc[..begin + EXCHANGE_BEGIN.len()],
            &doc[end..]
        );
        std::fs::write(&path, updated).unwrap();
        return;
    }
    assert_eq!(
        current, generated,
        "docs/protocol.md's exchange is not what the binary says now: run `TOOLWIRE_UPDATE_DOCS=1 cargo test --test readme protocol_md` and review the diff"
    );
}

/// docs/benchmarks.md's table is benches/report.py's rendering of the
/// saved run it names, never a hand edit.
#[test]
fn the_benchmark_table_is_rendered_from_one_saved_run() {
    let page = read(&Path::new(ROOT).join("docs/benchmarks.md"));
    // The generated section names its own results file; the prose around it
    // may name others (how to make one), which are not what it renders.
    let section = page
        .split("<!-- bench-table: generated by benches/report.py, do not edit -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- bench-table: end -->").next())
        .expect("docs/benchmarks.md has the generated bench-table section");
    let results = section
        .split('`')
        .find(|s| {
            s.starts_with("benches/results/")
                && s.ends_with(".json")
                && Path::new(ROOT).join(s).is_file()
        })
        .expect("docs/benchmarks.md's table names the results file it comes from");
    let out = Command::new("python3")
        .arg("benches/report.py")
        .arg(results)
        .args(["--check", "docs/benchmarks.md"])
        .current_dir(ROOT)
        .output()
        .expect("python3 (README's requirements)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
