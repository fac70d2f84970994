//! The command line as a newcomer meets it: errors that name what they are
//! about, flag combinations that make no sense refused, plain logs unless
//! on a terminal.

use std::process::{Command, Output, Stdio};

fn toolwire(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn shared_only_flags_without_shared_are_refused_by_the_parser() {
    for args in [
        &["serve", "--idle-timeout", "5"][..],
        &["serve", "--workspace", "."][..],
    ] {
        let out = toolwire(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains("--shared"), "{args:?}: {err}");
    }
}

#[test]
fn a_missing_workspace_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let file = dir.path().join("file");
    std::fs::write(&file, "").unwrap();
    for (path, says) in [(&missing, "no such directory"), (&file, "not a directory")] {
        let path = path.to_str().unwrap();
        let out = toolwire(&["serve", "--shared", "--workspace", path]);
        assert_eq!(out.status.code(), Some(2));
        let err = stderr(&out);
        assert!(err.contains(path) && err.contains(says), "{err}");
    }
}

#[test]
fn a_socket_directory_that_cannot_be_made_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("missing/deeper");
    let out = Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["serve", "--shared", "--workspace"])
        .arg(dir.path())
        .env("XDG_RUNTIME_DIR", &runtime)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains(&runtime.join("toolwire").display().to_string()),
        "{err}"
    );
}

#[test]
fn schema_errors_name_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let missing = missing.to_str().unwrap();
    let out = toolwire(&["schema", "--check", missing]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(
        err.trim(),
        format!("toolwire schema --check: {missing}: no such directory")
    );

    let file = dir.path().join("file");
    std::fs::write(&file, "").unwrap();
    let file = file.to_str().unwrap();
    let out = toolwire(&["schema", "--out", file]);
    assert!(!out.status.success());
    assert_eq!(
        stderr(&out).trim(),
        format!("toolwire schema --out: {file} is not a directory")
    );
}

/// The commands `toolwire --help` lists (but `help`).
fn commands() -> Vec<String> {
    let help = String::from_utf8(toolwire(&["--help"]).stdout).unwrap();
    help.split("Commands:")
        .nth(1)
        .unwrap_or_default()
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_argument_of_every_command_has_help_text() {
    let commands = commands();
    assert!(commands.iter().any(|c| c == "repair"), "{commands:?}");
    for command in commands {
        let out = toolwire(&[&command, "--help"]);
        let help = String::from_utf8_lossy(&out.stdout).into_owned();
        // `  <PATH>  The transcript ...`: a name, two spaces, a description.
        let bare: Vec<&str> = help
            .lines()
            .filter(|l| l.trim_start().starts_with(['<', '[']))
            .filter(|l| {
                l.trim()
                    .split_once("  ")
                    .is_none_or(|(_, text)| text.trim().is_empty())
            })
            .collect();
        assert!(
            bare.is_empty(),
            "toolwire {command}: arguments without help: {bare:?}"
        );
    }
}

/// A malformed frame makes `serve` log a warning; run it with stderr on a
/// pseudo-terminal (util-linux `script`) or a pipe and return what it logged.
fn warning(on_terminal: bool, no_color: bool) -> String {
    let input = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(input.path(), "Content-Length: x\r\n\r\n").unwrap();
    let serve = format!(
        "{} serve < {}",
        env!("CARGO_BIN_EXE_toolwire"),
        input.path().display()
    );
    // Either way the log reaches us on stdout, the protocol's output not.
    let mut cmd = if on_terminal {
        let mut c = Command::new("script");
        c.args(["-qec", &format!("{serve} >/dev/null"), "/dev/null"]);
        c
    } else {
        let mut c = Command::new("sh");
        c.args(["-c", &format!("{serve} 2>&1 >/dev/null")]);
        c
    };
    cmd.env_remove("NO_COLOR").env("RUST_LOG", "toolwire=warn");
    if no_color {
        cmd.env("NO_COLOR", "1");
    }
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .expect("`script` (util-linux) is missing: install it with `apt-get install bsdutils`");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("malformed frame"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn logs_are_coloured_only_on_a_terminal_and_never_with_no_color() {
    assert!(warning(true, false).contains('\x1b'));
    assert!(!warning(true, true).contains('\x1b'));
    assert!(!warning(false, false).contains('\x1b'));
}
