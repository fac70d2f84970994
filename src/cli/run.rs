//! `toolwire run -- <agent> [args…]`: the agent started through the
//! workspace's proxy, pointed at it the way that agent reads its endpoint.
//!
//! The proxy is the one `toolwire proxy` runs for the workspace (it writes
//! its address in `<dataDir>/proxy.json` and removes it when it stops),
//! checked for life; else a proxy of this command's own on a free loopback
//! port, stopped when the agent exits. The agent gets the terminal (stdio
//! inherited, same process group), signals sent to `toolwire run` by
//! another process (SIGINT, SIGTERM, SIGHUP), and its exit status comes
//! back as this command's. When it exits, one line on stderr says what the
//! proxy saved for the requests it served meanwhile.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ForCli;
use toolwire::proxy::stats::SessionStats;

#[derive(clap::Args)]
pub struct Args {
    /// Print the environment variables and arguments the agent would get,
    /// and exit without starting anything.
    #[arg(long)]
    print_env: bool,
    /// The agent's command line: `claude`, `codex`, `gemini`, `opencode`
    /// and `pi` are pointed at the proxy their own way; any other command
    /// gets OPENAI_BASE_URL, ANTHROPIC_BASE_URL and GOOGLE_GEMINI_BASE_URL.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "AGENT"
    )]
    command: Vec<OsString>,
}

/// The file a running `toolwire proxy` names itself in.
pub const ADDRESS_FILE: &str = "proxy.json";

/// What `<dataDir>/proxy.json` holds.
#[derive(Serialize, Deserialize)]
pub struct Address {
    pub url: String,
    pub pid: u32,
}

/// Write the proxy's address (atomically: a reader never sees half).
/// Like everything in the data directory, it is the user's alone (0600).
pub fn announce(data_dir: &Path, url: &str) -> std::io::Result<()> {
    use std::io::Write;
    toolwire::private::create_dir_all(data_dir)?;
    let text = serde_json::to_vec(&Address {
        url: url.to_owned(),
        pid: std::process::id(),
    })
    .map_err(std::io::Error::other)?;
    let mut tmp = toolwire::private::temp_file_in(data_dir, ADDRESS_FILE)?;
    tmp.write_all(&text)?;
    tmp.persist(data_dir.join(ADDRESS_FILE))
        .map(drop)
        .map_err(|err| err.error)
}

/// Remove the address file if it still names this process.
pub fn withdraw(data_dir: &Path) {
    let path = data_dir.join(ADDRESS_FILE);
    if read_address(&path).is_some_and(|a| a.pid == std::process::id()) {
        let _ = std::fs::remove_file(path);
    }
}

fn read_address(path: &Path) -> Option<Address> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// The workspace's running proxy: named in the address file, its process
/// alive and its port answering.
fn running_proxy(data_dir: &Path) -> Option<String> {
    let address = read_address(&data_dir.join(ADDRESS_FILE))?;
    let pid = libc::pid_t::try_from(address.pid).ok()?;
    // SAFETY: signal 0 only checks that the process exists.
    let alive = unsafe { libc::kill(pid, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    let addr: SocketAddr = address.url.strip_prefix("http://")?.parse().ok()?;
    (alive && TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok())
        .then_some(address.url)
}

/// What the agent is started with.
#[derive(Debug, Default)]
struct Plan {
    env: Vec<(String, String)>,
    /// The whole command line, program first.
    argv: Vec<OsString>,
    /// A file the agent reads its endpoint from (pi's extension): path and
    /// contents, written into a temporary directory before it starts.
    file: Option<(String, String)>,
}

/// The name `toolwire run` knows an agent by: its program's file name.
fn agent_name(program: &OsStr) -> String {
    Path::new(program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// How `command` is pointed at the proxy at `url` (`http://host:port`);
/// `dir` is where a file it needs would be written.
fn plan(command: &[OsString], url: &str, dir: &Path) -> Plan {
    let mut plan = Plan {
        argv: command.to_vec(),
        ..Plan::default()
    };
    let Some(program) = command.first() else {
        return plan;
    };
    let openai = format!("{url}/v1");
    match agent_name(program).as_str() {
        "claude" => plan.env.push(("ANTHROPIC_BASE_URL".into(), url.into())),
        // Codex 0.169 ignores OPENAI_BASE_URL; `-c` sets its config key
        // for this run only, never in the user's config.toml.
        "codex" => {
            plan.argv.splice(
                1..1,
                ["-c".into(), format!("openai_base_url={openai}").into()],
            );
        }
        "gemini" => plan.env.push(("GOOGLE_GEMINI_BASE_URL".into(), url.into())),
        // opencode merges OPENCODE_CONFIG_CONTENT over its config files.
        "opencode" => {
            let mut config = std::env::var("OPENCODE_CONFIG_CONTENT")
                .ok()
                .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
                .filter(serde_json::Value::is_object)
                .unwrap_or_else(|| serde_json::json!({}));
            for (provider, base) in [
                ("anthropic", openai.clone()),
                ("openai", openai.clone()),
                ("google", format!("{url}/v1beta")),
            ] {
                config["provider"][provider]["options"]["baseURL"] = base.into();
            }
            plan.env
                .push(("OPENCODE_CONFIG_CONTENT".into(), config.to_string()));
        }
        // pi takes an extension (`-e`) that overrides its providers' base
        // URLs; its own files stay as they are.
        "pi" => {
            let path = dir.join("toolwire-proxy.ts").display().to_string();
            let text = format!(
                "// Written by `toolwire run`: pi's providers through the workspace's proxy.\n\
                 export default function (pi: any) {{\n\
                 \x20 pi.registerProvider(\"anthropic\", {{ baseUrl: {url:?} }});\n\
                 \x20 pi.registerProvider(\"openai\", {{ baseUrl: {openai:?} }});\n\
                 \x20 pi.registerProvider(\"google\", {{ baseUrl: {:?} }});\n\
                 }}\n",
                format!("{url}/v1beta")
            );
            plan.argv.splice(1..1, ["-e".into(), path.clone().into()]);
            plan.file = Some((path, text));
        }
        _ => {
            plan.env.push(("OPENAI_BASE_URL".into(), openai));
            plan.env.push(("ANTHROPIC_BASE_URL".into(), url.into()));
            plan.env.push(("GOOGLE_GEMINI_BASE_URL".into(), url.into()));
        }
    }
    plan
}

pub fn run(args: Args) -> ExitCode {
    match start(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("toolwire run: {err}");
            ExitCode::FAILURE
        }
    }
}

fn start(args: Args) -> Result<ExitCode, String> {
    let workspace =
        std::env::current_dir().map_err(|err| format!("no workspace directory: {err}"))?;
    let config = toolwire::config::load(&workspace, None).map_err(|err| err.for_cli())?;
    let data_dir = config.data_dir.clone();
    let files = tempfile::Builder::new()
        .prefix("toolwire-run-")
        .tempdir()
        .map_err(|err| format!("cannot make a temporary directory: {err}"))?;
    if args.print_env {
        let url = running_proxy(&data_dir);
        let shown = url
            .clone()
            .unwrap_or_else(|| "http://127.0.0.1:PORT".into());
        print_plan(&plan(&args.command, &shown, files.path()), url.is_none());
        return Ok(ExitCode::SUCCESS);
    }
    let mut own = None;
    let url = match running_proxy(&data_dir) {
        Some(url) => url,
        None => {
            let (child, url) = start_proxy(&workspace, &data_dir)?;
            own = Some(child);
            url
        }
    };
    let before = totals(&data_dir);
    let plan = plan(&args.command, &url, files.path());
    if let Some((path, text)) = &plan.file {
        std::fs::write(path, text).map_err(|err| format!("cannot write {path}: {err}"))?;
    }
    let status = run_agent(&plan);
    if let Some(proxy) = own {
        stop(proxy);
    }
    let status = status?;
    summary(&before, &totals(&data_dir), &url);
    Ok(status)
}

#[allow(clippy::print_stdout)]
fn print_plan(plan: &Plan, placeholder: bool) {
    if placeholder {
        println!(
            "# no proxy is running for this workspace: `toolwire run` starts one on a free port (PORT)"
        );
    }
    for (name, value) in &plan.env {
        println!("{name}={}", quoted(value));
    }
    let argv: Vec<String> = plan
        .argv
        .iter()
        .map(|a| quoted(&a.to_string_lossy()))
        .collect();
    println!("# command: {}", argv.join(" "));
    if let Some((path, text)) = &plan.file {
        println!("# {path} (written for the run, removed after):");
        for line in text.lines() {
            println!("#   {line}");
        }
    }
}

/// A word as a POSIX shell would read it back.
fn quoted(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// A proxy of this command's own, on a free loopback port, in a process
/// group of its own (a Ctrl-C at the terminal is the agent's, not the
/// proxy's); its log goes to `<dataDir>/run-proxy.log`.
fn start_proxy(workspace: &Path, data_dir: &Path) -> Result<(Child, String), String> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().map_err(|err| format!("cannot find toolwire: {err}"))?;
    let mut command = Command::new(exe);
    command
        .args(["proxy", "--listen", "127.0.0.1:0", "--unannounced"])
        .current_dir(workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    // SAFETY: only prctl, async-signal-safe, between fork and exec: the
    // proxy gets SIGTERM if `toolwire run` dies without stopping it
    // (SIGKILL), so no proxy is left behind.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .map_err(|err| format!("cannot start the proxy: {err}"))?;
    let Some(stderr) = child.stderr.take() else {
        return Err("cannot read the proxy's output".into());
    };
    let mut lines = BufReader::new(stderr).lines();
    let mut said = Vec::new();
    let url = loop {
        match lines.next() {
            Some(Ok(line)) => match line.strip_prefix("toolwire proxy listening on ") {
                Some(url) => break url.to_owned(),
                None => said.push(line),
            },
            _ => {
                let _ = child.wait();
                return Err(format!("the proxy did not start: {}", said.join("\n")));
            }
        }
    };
    let log_path = data_dir.join("run-proxy.log");
    let _ = std::fs::create_dir_all(data_dir);
    std::thread::spawn(move || {
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path)
            .ok();
        for line in lines.map_while(Result::ok) {
            if let Some(log) = log.as_mut() {
                let _ = writeln!(log, "{line}");
            }
        }
    });
    Ok((child, url))
}

/// SIGTERM, then wait: the proxy closes its sessions and exits.
fn stop(mut proxy: Child) {
    if let Ok(pid) = libc::pid_t::try_from(proxy.id()) {
        // SAFETY: a signal to our own child, which has not been reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let _ = proxy.wait();
}

/// The agent's pid while it runs, for the signal handler.
static AGENT: AtomicI32 = AtomicI32::new(0);

/// Signals another process sent `toolwire run` go on to the agent. One
/// the kernel sent (a Ctrl-C at the terminal: `si_code` above 0) reached
/// the agent already, as a member of the terminal's foreground group, and
/// is not sent twice.
extern "C" fn forward(signal: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo with SA_SIGINFO.
    let code = if info.is_null() {
        0
    } else {
        unsafe { (*info).si_code }
    };
    let pid = AGENT.load(Ordering::SeqCst);
    if pid > 0 && code <= 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, signal) };
    }
}

const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

fn install_forwarding() {
    for signal in FORWARDED {
        // SAFETY: a handler that only reads an atomic and calls kill.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = forward as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// Run the agent to its end; its exit status, or 128 + the signal that
/// ended it, as a shell reports it.
fn run_agent(plan: &Plan) -> Result<ExitCode, String> {
    let Some((program, args)) = plan.argv.split_first() else {
        return Err("no agent command given".into());
    };
    install_forwarding();
    let mut child = Command::new(program)
        .args(args)
        .envs(plan.env.iter().map(|(k, v)| (k, v)))
        .spawn()
        .map_err(|err| format!("cannot run {}: {err}", program.to_string_lossy()))?;
    AGENT.store(i32::try_from(child.id()).unwrap_or(0), Ordering::SeqCst);
    let status = child
        .wait()
        .map_err(|err| format!("waiting for the agent: {err}"))?;
    AGENT.store(0, Ordering::SeqCst);
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// Per session: requests, characters received and sent, results saved.
fn totals(data_dir: &Path) -> BTreeMap<String, SessionStats> {
    toolwire::proxy::stats::collect(data_dir, None)
        .unwrap_or_default()
        .into_iter()
        .map(|s| (s.session_id.clone(), s))
        .collect()
}

/// The one line said when the agent exits.
fn summary(
    before: &BTreeMap<String, SessionStats>,
    after: &BTreeMap<String, SessionStats>,
    url: &str,
) {
    let (mut requests, mut received, mut sent, mut persisted, mut sessions) = (0, 0, 0, 0, 0);
    for (id, now) in after {
        let then = before.get(id);
        let was = |f: fn(&SessionStats) -> u64| then.map_or(0, f);
        let served = now.requests.saturating_sub(was(|s| s.requests));
        if served == 0 {
            continue;
        }
        sessions += 1;
        requests += served;
        received += now.chars_received.saturating_sub(was(|s| s.chars_received));
        sent += now.chars_sent.saturating_sub(was(|s| s.chars_sent));
        persisted += now
            .results_persisted
            .saturating_sub(was(|s| s.results_persisted));
    }
    if requests == 0 {
        eprintln!("toolwire: no request went through the proxy at {url}");
        return;
    }
    let saved = received.saturating_sub(sent);
    let share = if received > 0 {
        saved as f64 * 100.0 / received as f64
    } else {
        0.0
    };
    eprintln!(
        "toolwire: {requests} requests in {sessions} session(s) through {url}: {saved} of {received} request characters not sent ({share:.1}%), {persisted} results saved to disk"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn each_agent_is_pointed_its_own_way() {
        let dir = Path::new("/tmp/x");
        let url = "http://127.0.0.1:9";
        let codex = plan(&argv(&["codex", "exec", "hi"]), url, dir);
        assert_eq!(
            codex.argv,
            argv(&[
                "codex",
                "-c",
                "openai_base_url=http://127.0.0.1:9/v1",
                "exec",
                "hi"
            ])
        );
        assert!(codex.env.is_empty());
        let claude = plan(&argv(&["/usr/bin/claude", "-p", "x"]), url, dir);
        assert_eq!(claude.env, [("ANTHROPIC_BASE_URL".into(), url.into())]);
        let other = plan(&argv(&["./agent.sh"]), url, dir);
        assert_eq!(other.env.len(), 3);
        let pi = plan(&argv(&["pi", "-p", "x"]), url, dir);
        assert_eq!(pi.argv[1], "-e");
        assert!(
            pi.file
                .is_some_and(|(_, text)| text.contains("http://127.0.0.1:9/v1"))
        );
    }

    #[test]
    fn words_are_quoted_for_a_shell() {
        assert_eq!(quoted("a=b/c"), "a=b/c");
        assert_eq!(quoted("it's"), r"'it'\''s'");
        assert_eq!(quoted(""), "''");
    }
}
