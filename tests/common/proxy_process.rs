//! A real `toolwire proxy` process for the tests: started in a workspace
//! directory on a port the system picks, and ready once it has said where
//! it listens. Include it with `#[path = "common/proxy_process.rs"] mod
//! proxy_process;`.
#![allow(dead_code)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, Command};

/// The hex SHA-256 of a tenant's token, as `[proxy.auth]` holds it.
pub fn sha256_hex(text: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// How long a proxy may take to start listening.
const START_LIMIT: Duration = Duration::from_secs(300);

/// Start `toolwire proxy ARGS` in `dir` with `RUST_LOG=log`; returns the
/// process (killed when dropped), the URL it listens on, and the rest of
/// its log, which the caller must keep draining so the proxy never blocks
/// on a full pipe. `tag` prefixes the log lines echoed before it listens.
pub async fn start(
    dir: &Path,
    args: &[&str],
    log: &str,
    tag: &str,
) -> (Child, String, Lines<BufReader<ChildStderr>>) {
    start_env(dir, args, log, tag, &[]).await
}

/// [`start`] with more environment variables for the proxy.
pub async fn start_env(
    dir: &Path,
    args: &[&str],
    log: &str,
    tag: &str,
    envs: &[(&str, &str)],
) -> (Child, String, Lines<BufReader<ChildStderr>>) {
    start_limited(dir, args, log, tag, envs, None).await
}

/// [`start_env`], with the proxy's open-file limit (soft and hard, so it
/// cannot raise it) set to `open_files` when given.
pub async fn start_limited(
    dir: &Path,
    args: &[&str],
    log: &str,
    tag: &str,
    envs: &[(&str, &str)],
    open_files: Option<u64>,
) -> (Child, String, Lines<BufReader<ChildStderr>>) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolwire"));
    if let Some(n) = open_files {
        let limit = libc::rlimit {
            rlim_cur: n,
            rlim_max: n,
        };
        // SAFETY: only setrlimit, async-signal-safe, runs in the child
        // between fork and exec.
        unsafe {
            command.pre_exec(move || {
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = command
        .arg("proxy")
        .args(args)
        .current_dir(dir)
        .env("RUST_LOG", log)
        // Outbound settings from the machine running the tests never reach
        // a test's proxy; tests/egress.rs sets them itself.
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR")
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = tokio::time::timeout(START_LIMIT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(url) = line.strip_prefix("toolwire proxy listening on ") {
                return url.to_owned();
            }
            eprintln!("{tag}: {line}");
        }
        panic!("the {tag} exited before listening");
    })
    .await
    .unwrap();
    (child, url, lines)
}

/// Keep reading a proxy's log (so it never blocks on a full pipe) into a
/// string the test can look at.
pub fn keep_log(
    mut lines: Lines<BufReader<ChildStderr>>,
) -> std::sync::Arc<std::sync::Mutex<String>> {
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = log.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let mut s = sink.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    });
    log
}

/// `toolwire stats --json` in the workspace `dir`: one object a session.
pub fn stats(dir: &Path) -> Vec<serde_json::Value> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["stats", "--json"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    match serde_json::from_slice(&out.stdout).unwrap() {
        serde_json::Value::Array(sessions) => sessions,
        other => panic!("toolwire stats --json printed {other}"),
    }
}
