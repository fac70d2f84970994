//! The command line as a newcomer meets it: errors that name what they are
//! about, flag combinations that make no sense refused, plain logs unless
//! on a terminal.

mod common;

use std::process::{Command, Output, Stdio};

use common::commit_logs;

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

/// `toolwire ARGS` run in `dir`.
fn toolwire_in(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Bug: repair said "`toolwire import` converts it" of a file of bare
/// messages, and `import` refused that file for every `--from`. The advice
/// is now a command that works, and following it gives a transcript that
/// repair fixes.
#[test]
fn repairs_advice_for_bare_messages_is_a_command_that_works() {
    let dir = tempfile::tempdir().unwrap();
    let bare = dir.path().join("bare.jsonl");
    std::fs::write(
        &bare,
        concat!(
            r#"{"role":"user","content":"list"}"#,
            "\n",
            r#"{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{}}]}"#,
            "\n",
            r#"{"role":"user","content":"never answered"}"#,
            "\n"
        ),
    )
    .unwrap();
    let before = std::fs::read(&bare).unwrap();
    let out = toolwire_in(dir.path(), &["repair", "bare.jsonl"]);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(!err.contains("invalid params at"), "{err}");
    assert!(err.contains("a list of anthropic messages"), "{err}");
    let advice = "toolwire import --from messages bare.jsonl -o NEW.jsonl";
    assert!(err.contains(advice), "{err}");
    assert_eq!(std::fs::read(&bare).unwrap(), before, "nothing written");

    // Follow the advice, then repair the result.
    let out = toolwire_in(
        dir.path(),
        &[
            "import",
            "--from",
            "messages",
            "bare.jsonl",
            "-o",
            "NEW.jsonl",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("3 anthropic messages"),
        "{}",
        stderr(&out)
    );
    let out = toolwire_in(dir.path(), &["repair", "NEW.jsonl"]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{said}{}", stderr(&out));
    assert!(said.contains("dropped tool_use toolu_1"), "{said}");
    let out = toolwire_in(dir.path(), &["check", "NEW.jsonl"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // `--from messages` refuses what is not bare messages, saying what it is.
    let out = toolwire_in(dir.path(), &["import", "--from", "messages", "NEW.jsonl"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("a toolwire transcript (anthropic), not a list of messages"),
        "{}",
        stderr(&out)
    );
}

/// A `toolwire.toml` with a bad key, as every command reports it: named in
/// the file's own style, with its line, without JSON-RPC's framing.
#[test]
fn a_broken_config_is_refused_by_every_command_in_the_files_words() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolwire.toml"),
        "data_dir = \".toolwire\"\n[limits]\npreview_charz = 3\n",
    )
    .unwrap();
    let transcript = dir.path().join("t.jsonl");
    std::fs::write(&transcript, "{\"role\":\"user\",\"content\":\"hi\"}\n").unwrap();
    let t = transcript.to_str().unwrap();
    for args in [
        &["check", t][..],
        &["repair", "--dry-run", t][..],
        &["gc"][..],
        &["show", "s1", "toolu_1"][..],
        &["stats"][..],
    ] {
        let out = toolwire_in(dir.path(), args);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?} accepted a broken config");
        let first = err.lines().next().unwrap_or("");
        assert!(
            first.starts_with(&format!("toolwire {}: ", args[0])),
            "{args:?}: {err}"
        );
        assert!(!err.contains("invalid params at"), "{args:?}: {err}");
        assert!(
            err.contains("toolwire.toml:3: `limits.preview_charz`"),
            "{args:?}: {err}"
        );
        assert!(
            err.contains(
                "expected one of `max_result_chars`, `max_message_chars`, `preview_chars`"
            ),
            "{args:?}: {err}"
        );
    }
    // check cannot check: 2, as for a file it cannot read.
    assert_eq!(
        toolwire_in(dir.path(), &["check", t]).status.code(),
        Some(2)
    );
}

/// Bug: `show` said only that nothing was saved, not where it looked.
#[test]
fn show_names_the_data_directory_it_searched() {
    let dir = tempfile::tempdir().unwrap();
    let out = toolwire_in(dir.path(), &["show", "s1", "toolu_1"]);
    let err = stderr(&out);
    assert!(!out.status.success());
    let data = dir.path().canonicalize().unwrap().join(".toolwire");
    assert!(
        err.contains(&format!("searched the data directory {}", data.display()))
            || err.contains(&format!(
                "searched the data directory {}",
                dir.path().join(".toolwire").display()
            )),
        "{err}"
    );
    assert!(err.contains("--workspace"), "{err}");
}

/// `toolwire ARGS` started in `dir` with piped stdin and stdout and the
/// given stderr.
fn spawn_in(dir: &std::path::Path, args: &[&str], stderr: Stdio) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// One LSP frame of `body`.
fn frame(body: &serde_json::Value) -> Vec<u8> {
    let body = body.to_string();
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// Bug: bare JSON on `serve`'s stdin got no reply, and only "bytes
/// remaining on stream" on stderr.
#[test]
fn serve_on_unframed_input_says_it_expects_content_length_and_fails() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_in(dir.path(), &["serve"], Stdio::piped());
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{}}\n")
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert!(
        err.contains("unframed JSON") && err.contains("Content-Length"),
        "{err}"
    );
    // The reply is a framed parse error saying the same.
    let reply = String::from_utf8_lossy(&out.stdout).into_owned();
    let (header, body) = reply
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("{reply:?}"));
    assert_eq!(header, format!("Content-Length: {}", body.len()));
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(body["error"]["code"], -32700, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expects LSP framing"),
        "{body}"
    );
}

fn send_signal(pid: u32, signal: &str) {
    let sent = Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -s {signal} {pid}");
}

/// Bug: a `proxy` stopped with SIGTERM left its commit log behind (SIGINT
/// removed it); `serve` removed it on neither. Both signals now stop
/// `serve` as its client going away does.
#[test]
fn serve_stopped_by_sigterm_or_sigint_removes_its_commit_log() {
    use std::io::{BufReader, Write};
    for signal in ["TERM", "INT"] {
        let dir = tempfile::tempdir().unwrap();
        let mut child = spawn_in(dir.path(), &["serve"], Stdio::null());
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut read_reply = || {
            let body = common::read_frame_blocking(&mut stdout);
            serde_json::from_slice::<serde_json::Value>(&body).unwrap()
        };
        stdin
            .write_all(&frame(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})))
            .unwrap();
        assert!(read_reply()["result"].is_object());
        // One durable commit: the process's commit log now exists.
        stdin
            .write_all(&frame(
                &serde_json::json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
            ))
            .unwrap();
        stdin
            .write_all(&frame(
                &serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "pair/append",
                "params": {"sessionId": "s1", "message": {"role": "user", "content": "hi"}}}),
            ))
            .unwrap();
        let reply = read_reply();
        assert_eq!(reply["result"]["status"], "committed", "{reply}");
        let data = dir.path().join(".toolwire");
        assert_eq!(commit_logs(&data).len(), 1, "SIG{signal}");

        send_signal(child.id(), signal);
        let status = child.wait().unwrap();
        assert!(status.code().is_some(), "SIG{signal}: killed by the signal");
        assert_eq!(commit_logs(&data), Vec::<String>::new(), "SIG{signal}");
        // The transcript holds the commit.
        let transcript = std::fs::read_to_string(data.join("sessions/s1.jsonl")).unwrap();
        assert!(transcript.contains("\"hi\""), "{transcript}");
        drop(stdin);
    }
}

/// The same for `proxy`: SIGINT always removed its commit log, SIGTERM
/// left it behind.
#[test]
fn proxy_stopped_by_sigterm_or_sigint_removes_its_commit_log() {
    use std::io::{BufRead, BufReader, Read, Write};
    for signal in ["TERM", "INT"] {
        let dir = tempfile::tempdir().unwrap();
        // An upstream nobody listens on: the request is budgeted (and its
        // decision journaled) before forwarding fails with a 502.
        std::fs::write(
            dir.path().join("toolwire.toml"),
            "[proxy.upstreams]\nanthropic = \"http://127.0.0.1:9\"\n",
        )
        .unwrap();
        let mut child = spawn_in(
            dir.path(),
            &["proxy", "--listen", "127.0.0.1:0"],
            Stdio::piped(),
        );
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("the proxy exited before listening")
                .unwrap();
            if let Some(url) = line.strip_prefix("toolwire proxy listening on http://") {
                break url.to_owned();
            }
        };
        // Keep draining its log so it never blocks on a full pipe.
        let drain = std::thread::spawn(move || lines.count());
        let body = serde_json::json!({"model": "m", "max_tokens": 1, "messages": [
            {"role": "user", "content": "run it"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x".repeat(60_000)}]}
        ]})
        .to_string();
        let mut stream = std::net::TcpStream::connect(&url).unwrap();
        write!(
            stream,
            "POST /v1/messages HTTP/1.1\r\nHost: {url}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        assert!(response.starts_with("HTTP/1.1 502"), "{response}");
        assert!(
            response.contains("x-toolwire-budget: applied"),
            "{response}"
        );
        let data = dir.path().join(".toolwire");
        assert_eq!(commit_logs(&data).len(), 1, "SIG{signal}");

        send_signal(child.id(), signal);
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "SIG{signal}");
        assert_eq!(commit_logs(&data), Vec::<String>::new(), "SIG{signal}");
        drain.join().unwrap();
    }
}
