//! A real agent CLI reads a saved output back through the proxy's `/mcp`
//! (PROTOCOL.md 12.3): Claude Code, Codex and Gemini CLI, each configured
//! only with the proxy's base URL (with a tenant's token) and `<base>/mcp`
//! as a remote MCP server, the one-line settings docs/proxy.md shows. The
//! scripted provider's model (tests/scripted_provider) has the agent run a
//! command whose output is over the budget, so the proxy saves it and
//! sends a preview naming its `toolwire://` link; it then tries to `cat`
//! the saved file (the agent runs as another user than the proxy, whose
//! data directory is private, so it cannot), and reads the output back
//! with the agent's MCP tool, page after page, as the tool's answers say,
//! until the end. The test asserts that every page the provider got back
//! is the exact slice of the output the agent sent, that together they are
//! the whole of it, that every request reached the provider through the
//! proxy, and that the tool's calls were answered by the proxy's `/mcp`
//! (its request log).

#[path = "common/agent_cli.rs"]
mod agent_cli;
mod fake_provider;
#[path = "common/proxy_process.rs"]
mod proxy_process;
mod scripted_provider;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use agent_cli::Agent;
use proxy_process::sha256_hex;
use regex::Regex;
use scripted_provider::tap::{Sent, Tap};
use scripted_provider::{
    Api, FINAL_ANSWER, Move, ScriptedProvider, Seen, Turn, tool_calls, tool_results,
};
use serde_json::{Value, json};

/// How long one agent run may take.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// The tenant's token, in the agent's base URL and MCP server URL.
const TOKEN: &str = "tok-dev-7c1e4f";

/// The command whose output is saved: 18,893 bytes in 4,000 lines, over
/// the proxy's 8,000-character budget for a result and under what the
/// agents cap a shell output at themselves.
const COMMAND: &str = "seq 1 4000";

/// Lines per page the model asks for: about 5 KB, far under what the
/// agents cap an MCP tool's answer at.
const PAGE_LINES: u64 = 1000;

/// The user the agent runs as when the test runs as root (root reads
/// every file whatever its mode): `nobody`.
const AGENT_UID: u32 = 65534;

/// A saved output's link, as a preview names it. Only the link is
/// matched: the preview's wording around it is free to change.
static LINK: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"toolwire://saved-output/[^\s"'<>()\[\]]+"#).unwrap());

fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Every string inside a tool result, in order.
fn texts(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|i| texts(i, out)),
        Value::Object(map) => map.values().for_each(|i| texts(i, out)),
        _ => {}
    }
}

fn result_texts(content: &Value) -> Vec<String> {
    let mut out = Vec::new();
    texts(content, &mut out);
    out
}

/// The first saved output in the proxy's data directory.
fn saved_file(data_dir: &Path) -> Option<PathBuf> {
    let sessions = std::fs::read_dir(data_dir.join("sessions")).ok()?;
    for session in sessions.flatten() {
        if let Ok(files) = std::fs::read_dir(session.path().join("tool-results"))
            && let Some(file) = files.flatten().map(|f| f.path()).find(|p| p.is_file())
        {
            return Some(file);
        }
    }
    None
}

/// The read tool's answer as the agent shows it to the model. Claude Code
/// and Codex send the result's `structuredContent` (text, startLine,
/// endLine, totalLines, totalChars, truncated) as JSON text, which Claude
/// Code sends as it is and Codex after a header of its own (`Wall time:
/// …\nOutput:\n`). Gemini CLI sends the result's text blocks instead (the
/// page, then the note `[lines a-b of n; more follows: …]` while more
/// follows), each wrapped in `<untrusted_context>\n…\n</untrusted_context>`
/// with any closing tag inside escaped, joined by `\n`, as `output`: that
/// wrapping is undone here, and the page read as the same fields.
fn shown_page(agent: Agent, content: &Value) -> Option<Value> {
    if agent == Agent::GeminiCli {
        return gemini_page(content["output"].as_str()?);
    }
    let text = content.as_str()?;
    let json = match agent {
        Agent::Codex => text.split_once("\nOutput:\n")?.1,
        _ => text,
    };
    serde_json::from_str(json).ok()
}

/// Gemini CLI's wrapping of an MCP tool's text blocks, undone.
fn gemini_page(output: &str) -> Option<Value> {
    const OPEN: &str = "<untrusted_context>\n";
    const CLOSE: &str = "\n</untrusted_context>";
    static NOTE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^\[lines \d+-(\d+) of \d+; more follows").unwrap());
    let blocks = output.strip_prefix(OPEN)?.strip_suffix(CLOSE)?;
    let (page, note) = match blocks.split_once(&format!("{CLOSE}\n{OPEN}")) {
        Some((page, note)) => (page, Some(note)),
        None => (blocks, None),
    };
    let end_line = match note {
        Some(note) => Some(NOTE.captures(note)?[1].parse::<u64>().ok()?),
        None => None,
    };
    Some(json!({
        "text": page.replace("&lt;/untrusted_context&gt;", "</untrusted_context>"),
        "endLine": end_line,
        "truncated": note.is_some(),
    }))
}

/// Where the next page starts, as a model reads it off the tool's last
/// answer (`endLine` while `truncated`); `None` at the end, or when the
/// answer is not a page.
fn next_offset(agent: Agent, content: &Value) -> Option<u64> {
    let page = shown_page(agent, content)?;
    page["endLine"]
        .as_u64()
        .filter(|_| page["truncated"] == json!(true))
}

/// The read tool as the agent offers it, wherever the request declares
/// it: among its tools (Claude Code: `mcp__toolwire__read_saved_output`,
/// Gemini CLI: `mcp_toolwire_read_saved_output`) or in what a tool
/// search found (Codex: `read_saved_output` in the namespace
/// `mcp__toolwire`). Its name, and its namespace if any.
fn read_tool(v: &Value, namespace: Option<&str>) -> Option<(String, Option<String>)> {
    match v {
        Value::Object(map) => {
            let name = map.get("name").and_then(Value::as_str);
            if map.get("type").and_then(Value::as_str) == Some("namespace") {
                return map.get("tools").and_then(|tools| read_tool(tools, name));
            }
            name.filter(|n| n.ends_with("read_saved_output"))
                .filter(|_| !map.contains_key("call_id"))
                .map(|n| (n.to_owned(), namespace.map(str::to_owned)))
                .or_else(|| map.values().find_map(|v| read_tool(v, namespace)))
        }
        Value::Array(items) => items.iter().find_map(|v| read_tool(v, namespace)),
        _ => None,
    }
}

/// The name of the last tool the model called in a request's conversation.
fn last_call(api: Api, body: &Value) -> Option<String> {
    tool_calls(api, body).pop().map(|(_, name)| name)
}

/// Whether the agent offers a search of its deferred tools (Codex).
fn offers_tool_search(body: &Value) -> bool {
    body.get("tools")
        .and_then(Value::as_array)
        .is_some_and(|tools| tools.iter().any(|t| t["type"] == "tool_search"))
}

/// The scripted model: the big command, then a `cat` of the saved file,
/// then the pages of the link the preview named, through the agent's MCP
/// tool (found first with a tool search where the agent keeps its MCP
/// tools behind one), each at the offset the previous answer gave, until
/// an answer says nothing more follows.
fn planner(agent: Agent, data_dir: PathBuf) -> scripted_provider::Planner {
    Arc::new(move |turn: &Turn| {
        match turn.step {
            0 => return Move::Shell(COMMAND.to_owned()),
            1 => {
                let path = saved_file(&data_dir)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "/no/saved/output".to_owned());
                return Move::Shell(format!("cat '{path}'"));
            }
            _ => {}
        }
        let results = tool_results(turn.api, turn.body);
        let link = results
            .iter()
            .flat_map(|(_, content)| result_texts(content))
            .find_map(|t| LINK.find(&t).map(|m| m.as_str().to_owned()));
        let Some(link) = link else {
            return Move::Finish;
        };
        let last = last_call(turn.api, turn.body);
        let Some((tool, namespace)) = read_tool(turn.body, None) else {
            return if offers_tool_search(turn.body) && last.as_deref() != Some("tool_search") {
                Move::SearchTools {
                    query: "read_saved_output".to_owned(),
                }
            } else {
                Move::Finish
            };
        };
        let offset = if last.as_deref() == Some(tool.as_str()) {
            results
                .last()
                .and_then(|(_, content)| next_offset(agent, content))
        } else {
            Some(0)
        };
        match offset {
            Some(offset) => Move::Call {
                tool,
                namespace,
                input: json!({"uri": link, "offset": offset, "limit": PAGE_LINES}),
            },
            None => Move::Finish,
        }
    })
}

/// The proxy's workspace: tenants' tokens, previews naming links, a small
/// budget, every upstream the scripted provider.
fn write_proxy_config(dir: &Path, upstream: &str) {
    std::fs::write(
        dir.join("toolwire.toml"),
        format!(
            "durability = \"none\"\n\
             [limits]\nmax_result_chars = 8000\n\
             [proxy]\npreviews = \"mcp\"\n\
             [proxy.auth]\ntokens = [{{ name = \"dev\", sha256 = \"{}\" }}]\n\
             [proxy.upstreams]\nanthropic = \"{upstream}\"\nopenai = \"{upstream}\"\ngemini = \"{upstream}\"\n",
            sha256_hex(TOKEN)
        ),
    )
    .unwrap();
}

/// Add the proxy's `/mcp` as the agent's remote MCP server, as a user
/// would: Claude Code's `claude mcp add`, Codex's `mcp_servers` keys,
/// Gemini CLI's `mcpServers` in its settings (its `--yolo` approves the
/// tool as it does the shell).
async fn configure_mcp(agent: Agent, cmd: &mut tokio::process::Command, mcp: &str, home: &Path) {
    match agent {
        Agent::ClaudeCode => {
            let out = tokio::process::Command::new(agent_cli::bin("claude"))
                .args(["mcp", "add", "--scope", "user", "--transport", "http"])
                .args(["toolwire", mcp])
                .env("HOME", home)
                .env("TMPDIR", home)
                .env("DISABLE_TELEMETRY", "1")
                .env("DISABLE_AUTOUPDATER", "1")
                .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
                .stdin(std::process::Stdio::null())
                .output()
                .await
                .unwrap();
            assert!(
                out.status.success(),
                "claude mcp add failed:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            // Print mode asks for no permission: allow the tool, as the
            // shell tool is allowed.
            std::fs::create_dir_all(home.join(".claude")).unwrap();
            std::fs::write(
                home.join(".claude/settings.json"),
                r#"{"permissions": {"allow": ["Bash", "mcp__toolwire__read_saved_output"]}}"#,
            )
            .unwrap();
            cmd.env("BASH_MAX_OUTPUT_LENGTH", "100000");
        }
        Agent::Codex => {
            cmd.args(["-c", &format!("mcp_servers.toolwire.url=\"{mcp}\"")]);
        }
        Agent::GeminiCli => {
            // Next to the settings the agent's command wrote.
            let path = home.join(".gemini/settings.json");
            let mut settings: Value =
                serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            settings["mcpServers"] = json!({"toolwire": {"httpUrl": mcp}});
            std::fs::write(&path, settings.to_string()).unwrap();
        }
        other => panic!("{}: no remote MCP configuration here", other.name()),
    }
}

/// Hand a directory tree to `uid` (the agent's HOME and cwd).
fn give_to(dir: &Path, uid: u32) {
    std::os::unix::fs::chown(dir, Some(uid), Some(uid)).unwrap();
    if dir.is_dir() {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            if !entry.file_type().unwrap().is_symlink() {
                give_to(&entry.path(), uid);
            }
        }
    }
}

struct Run {
    output: Output,
    seen: Vec<Seen>,
    sent: Vec<Sent>,
    proxy_log: String,
    /// The saved output, as the proxy's data directory holds it.
    saved: Option<String>,
    root: bool,
}

async fn run(agent: Agent) -> Run {
    let root = running_as_root();
    let workspace = tempfile::tempdir().unwrap();
    let data_dir = workspace.path().join(".toolwire");
    let provider = ScriptedProvider::start_planned(planner(agent, data_dir.clone())).await;
    write_proxy_config(workspace.path(), &provider.url());
    let (proxy, proxy_url, mut lines) = proxy_process::start(
        workspace.path(),
        &["--listen", "127.0.0.1:0"],
        "toolwire=info,toolwire::proxy=debug",
        "proxy",
    )
    .await;
    let log = Arc::new(Mutex::new(String::new()));
    let drained = log.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let mut log = drained.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    // The agent's model requests pass a tap (what the agent sent, the
    // originals); its MCP requests go to the proxy itself.
    let tap = Tap::start(proxy_url.clone()).await;
    let base = format!("{}/t/{TOKEN}", tap.url());
    let mcp = format!("{proxy_url}/t/{TOKEN}/mcp");

    // The agent's HOME and cwd: somewhere `nobody` may enter when the
    // test is root (the suite's TMPDIR may be private), never inside the
    // proxy's workspace.
    let scratch = if root {
        tempfile::tempdir_in("/var/tmp").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let (home, cwd) = (scratch.path().join("home"), scratch.path().join("cwd"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&cwd).unwrap();
    let mut cmd = agent.command(&base, &home, &cwd);
    // `cat` says "Permission denied" in these words.
    cmd.env("LC_ALL", "C");
    configure_mcp(agent, &mut cmd, &mcp, &home).await;
    if root {
        give_to(scratch.path(), AGENT_UID);
        cmd.uid(AGENT_UID).gid(AGENT_UID);
    }
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{}: could not start: {e}", agent.name()));
    let output = tokio::time::timeout(RUN_LIMIT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{}: did not finish within {RUN_LIMIT:?}; the provider saw {} requests",
                agent.name(),
                provider.seen().len()
            )
        })
        .unwrap();
    drop(proxy);
    let seen = provider.seen();
    if let Some(dir) = std::env::var_os("TOOLWIRE_AGENTS_DUMP") {
        let dir = Path::new(&dir).join(format!("{}-mcp", agent.name()));
        std::fs::create_dir_all(&dir).unwrap();
        for (k, s) in seen.iter().enumerate() {
            std::fs::write(dir.join(format!("{k:03}.json")), &s.body).unwrap();
        }
        std::fs::write(dir.join("proxy.log"), &*log.lock().unwrap()).unwrap();
    }
    Run {
        output,
        seen,
        sent: tap.sent(),
        proxy_log: log.lock().unwrap().clone(),
        saved: saved_file(&data_dir).and_then(|p| std::fs::read_to_string(p).ok()),
        root,
    }
}

/// The output as the agent sent it: the text of its first tool result in
/// the first request that holds it, before the proxy.
fn original(agent: Agent, run: &Run) -> String {
    let api = agent.api();
    let content = run
        .sent
        .iter()
        .filter_map(|s| serde_json::from_slice::<Value>(&s.body).ok())
        .find_map(|body| {
            tool_results(api, &body)
                .into_iter()
                .find(|(id, _)| id == "tw_call_00")
                .map(|(_, c)| c)
        })
        .unwrap_or_else(|| {
            panic!(
                "{}: the agent never sent the command's output",
                agent.name()
            )
        });
    let texts = result_texts(&content);
    texts
        .into_iter()
        .max_by_key(String::len)
        .unwrap_or_default()
}

/// The text of the result of call `id` as the provider first got it.
fn received(agent: Agent, run: &Run, id: &str) -> String {
    run.seen
        .iter()
        .filter(|s| s.main && s.api == Some(agent.api()))
        .find_map(|s| {
            tool_results(agent.api(), &s.json())
                .into_iter()
                .find(|(i, _)| i == id)
        })
        .map(|(_, c)| result_texts(&c).join("\n"))
        .unwrap_or_default()
}

/// Lines `offset..offset + limit` of `text`, each with its line end.
fn slice(text: &str, offset: u64, limit: u64) -> String {
    text.split_inclusive('\n')
        .skip(offset as usize)
        .take(limit as usize)
        .collect()
}

/// The read tool's calls, in order (call id), each with the result the
/// provider got back for it, from the last main request.
fn page_results(agent: Agent, run: &Run) -> Vec<(String, Value)> {
    let api = agent.api();
    let Some(last) = run
        .seen
        .iter()
        .rev()
        .find(|s| s.main && s.api == Some(api))
        .map(Seen::json)
    else {
        return Vec::new();
    };
    let results = tool_results(api, &last);
    tool_calls(api, &last)
        .into_iter()
        .filter(|(_, name)| name.ends_with("read_saved_output"))
        .map(|(id, _)| {
            let content = results
                .iter()
                .find(|(r, _)| *r == id)
                .map(|(_, c)| c.clone())
                .unwrap_or(Value::Null);
            (id, content)
        })
        .collect()
}

async fn reads_saved_output_through_mcp(agent: Agent) {
    let run = run(agent).await;
    let stdout = String::from_utf8_lossy(&run.output.stdout);
    let stderr = String::from_utf8_lossy(&run.output.stderr);
    assert!(
        run.output.status.success() && stdout.contains(FINAL_ANSWER),
        "{}: exited {:?} without the final answer\nstdout:\n{stdout}\nstderr:\n{stderr}",
        agent.name(),
        run.output.status
    );
    // The output, as the agent sent it, went through the proxy, which
    // replaced it with a preview naming its link.
    let original = original(agent, &run);
    assert!(
        original.contains("\n3999\n4000"),
        "{}: the command's output is not in what the agent sent:\n{}",
        agent.name(),
        original.chars().take(500).collect::<String>()
    );
    assert!(
        run.saved.as_deref() == Some(original.as_str()),
        "{}: the proxy did not save the output the agent sent",
        agent.name()
    );
    let preview = received(agent, &run, "tw_call_00");
    assert!(
        LINK.is_match(&preview) && !preview.contains("\n3999\n"),
        "{}: the provider got no preview with a link for the big output:\n{preview}",
        agent.name()
    );

    // The agent could not read the saved file by its path.
    let cat = received(agent, &run, "tw_call_01");
    if run.root {
        assert!(
            cat.contains("Permission denied") && !cat.contains("\n3999\n"),
            "{}: the agent's `cat` of the saved file did not fail as it should:\n{cat}",
            agent.name()
        );
    } else {
        println!(
            "{}: not root, so the agent runs as the proxy's user; its cat said: {}",
            agent.name(),
            cat.chars().take(200).collect::<String>()
        );
    }

    // Every page is the exact slice, and together they are the output.
    let pages = page_results(agent, &run);
    let total_lines = original.split_inclusive('\n').count() as u64;
    let expected_pages = total_lines.div_ceil(PAGE_LINES);
    assert_eq!(
        pages.len() as u64,
        expected_pages,
        "{}: the model read {} pages of a {total_lines}-line output",
        agent.name(),
        pages.len()
    );
    let mut joined = String::new();
    for (k, (id, content)) in pages.iter().enumerate() {
        let offset = k as u64 * PAGE_LINES;
        let expected = slice(&original, offset, PAGE_LINES);
        let page = shown_page(agent, content).unwrap_or_default();
        assert!(
            page["text"].as_str() == Some(expected.as_str()),
            "{}: page {k} (call {id}, lines {offset}..) is not the output's slice byte for byte; the result was:\n{content}",
            agent.name()
        );
        joined.push_str(&expected);
    }
    assert!(
        joined == original,
        "{}: the pages do not add up to the output",
        agent.name()
    );
    println!(
        "{}: read {} pages ({} bytes) back through /mcp, each byte-exact",
        agent.name(),
        pages.len(),
        original.len()
    );

    // Every model request reached the provider through the proxy: the
    // provider got the requests the tap passed on, and nothing else (the
    // proxy answers a reachability check, Claude Code's `HEAD /`, itself).
    let mut through: Vec<String> = run
        .sent
        .iter()
        .filter(|s| s.method == "POST")
        .map(|s| {
            let path = s
                .path
                .strip_prefix(&format!("/t/{TOKEN}"))
                .unwrap_or(&s.path);
            format!("{} {path}", s.method)
        })
        .collect();
    let mut reached: Vec<String> = run
        .seen
        .iter()
        .map(|s| format!("{} {}", s.method, s.path))
        .collect();
    // Side requests (a title, a quota check) may overtake each other.
    through.sort();
    reached.sort();
    assert_eq!(
        reached,
        through,
        "{}: the provider's requests are not the ones the agent sent the proxy",
        agent.name()
    );
    // And the tool's calls were answered by the proxy's /mcp.
    let mcp_posts = run
        .proxy_log
        .lines()
        .filter(|l| l.contains("method=POST path=/mcp "))
        .count();
    assert!(
        mcp_posts >= pages.len(),
        "{}: the proxy logged {mcp_posts} POSTs to /mcp for {} pages",
        agent.name(),
        pages.len()
    );
    assert!(
        !run.proxy_log.contains(TOKEN),
        "{}: the proxy logged the token",
        agent.name()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_reads_a_saved_output_back_through_the_proxys_mcp() {
    reads_saved_output_through_mcp(Agent::ClaudeCode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_reads_a_saved_output_back_through_the_proxys_mcp() {
    reads_saved_output_through_mcp(Agent::GeminiCli).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_reads_a_saved_output_back_through_the_proxys_mcp() {
    reads_saved_output_through_mcp(Agent::Codex).await;
}
