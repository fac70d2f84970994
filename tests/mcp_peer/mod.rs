//! A raw MCP stdio peer for tests and benchmarks: starts a process, writes
//! JSON-RPC lines to it and reads its lines back exactly as they came, so
//! responses can be compared byte for byte. Every read is bounded in time.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Longest wait for one line; a hang fails the test instead of stalling it.
pub const WAIT: Duration = Duration::from_secs(60);

/// `tests/mcp/`, where the pinned third-party MCP software is installed.
pub fn mcp_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp")
}

/// The venv's Python (with the official `mcp` SDK), or a panic naming the
/// command that installs it.
pub fn python() -> PathBuf {
    let python = mcp_dir().join(".venv/bin/python");
    assert!(
        python.exists() && mcp_dir().join(".venv/.installed").exists(),
        "the MCP tests need the pinned Python SDK in tests/mcp/.venv: run ./tests/setup.sh (or bash tests/setup.d/30-mcp.sh)"
    );
    python
}

/// The reference "everything" server's entry point (with `node`).
pub fn everything_server() -> Vec<String> {
    let entry =
        mcp_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        entry.exists(),
        "the MCP tests need @modelcontextprotocol/server-everything in tests/mcp/node_modules: run ./tests/setup.sh (or bash tests/setup.d/30-mcp.sh)"
    );
    vec!["node".into(), entry.display().to_string(), "stdio".into()]
}

/// The test server written with the Python SDK.
pub fn sized_server() -> Vec<String> {
    vec![
        python().display().to_string(),
        mcp_dir().join("sized_server.py").display().to_string(),
    ]
}

/// The test server, serving one era only (`legacy` or `modern`).
pub fn sized_server_era(era: &str) -> Vec<String> {
    let mut argv = sized_server();
    argv.extend(["--era".into(), era.into()]);
    argv
}

/// `odd_server.py MODE ARGS...`: a server at the edges, written from the
/// specification without an SDK.
pub fn odd_server(mode: &str, args: &[&str]) -> Vec<String> {
    let mut argv = vec![
        python().display().to_string(),
        mcp_dir().join("odd_server.py").display().to_string(),
        mode.into(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    argv
}

pub struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Lines read while waiting for another.
    pub other: Vec<String>,
}

impl Peer {
    /// Start `argv` in `cwd`, its stderr inherited.
    pub fn start(argv: &[String], cwd: &Path) -> Peer {
        Peer::spawn(
            Command::new(&argv[0]).args(&argv[1..]),
            cwd,
            Stdio::inherit(),
        )
    }

    /// Start `argv` in `cwd` with `RUST_LOG` set to `filter`, its stderr
    /// written to `log`.
    pub fn start_logging(argv: &[String], cwd: &Path, filter: &str, log: &Path) -> Peer {
        let file = std::fs::File::create(log).unwrap();
        Peer::spawn(
            Command::new(&argv[0])
                .args(&argv[1..])
                .env("RUST_LOG", filter),
            cwd,
            Stdio::from(file),
        )
    }

    fn spawn(command: &mut Command, cwd: &Path, stderr: Stdio) -> Peer {
        let argv = command.get_program().to_owned();
        let mut child = command
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {argv:?}: {err}"));
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Peer {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            other: Vec::new(),
        }
    }

    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The next line, or `None` at the end of the output.
    pub fn next_line(&mut self) -> Option<String> {
        match self.lines.recv_timeout(WAIT) {
            Ok(line) => Some(line),
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => panic!("no line from the peer within {WAIT:?}"),
        }
    }

    /// Send a request and return the raw line of its response (lines in
    /// between, such as notifications, are kept in `other`).
    pub fn request(&mut self, id: i64, line: &str) -> String {
        self.send(line);
        self.response(id)
    }

    pub fn response(&mut self, id: i64) -> String {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            let line = self.next_line().expect("the peer ended before answering");
            let value: Value = serde_json::from_str(&line)
                .unwrap_or_else(|err| panic!("not JSON from the peer ({err}): {line}"));
            if value.get("id") == Some(&Value::from(id)) && value.get("method").is_none() {
                return line;
            }
            self.other.push(line);
        }
        panic!("no response to {id} within {WAIT:?}");
    }

    /// The raw line of the response to `id`, found without parsing the
    /// line whole (it may nest deeper than serde_json's default limit).
    pub fn response_unparsed(&mut self, id: i64) -> String {
        loop {
            let line = self.next_line().expect("the peer ended before answering");
            if toolwire::json::request_id(line.as_bytes()) == id {
                return line;
            }
            self.other.push(line);
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait for the process to exit with its input still open.
    pub fn exit_status(&mut self) -> ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the peer did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Close stdin and wait for the process to exit.
    pub fn finish(mut self) -> ExitStatus {
        drop(self.stdin.take());
        self.exit_status()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `toolwire mcp --session ID [extra...] -- argv...`
pub fn front_argv(session: &str, extra: &[&str], server: &[String]) -> Vec<String> {
    let mut argv = vec![
        env!("CARGO_BIN_EXE_toolwire").to_owned(),
        "mcp".into(),
        "--session".into(),
        session.into(),
    ];
    argv.extend(extra.iter().map(|s| s.to_string()));
    argv.push("--".into());
    argv.extend(server.iter().cloned());
    argv
}
