//! The real agent CLIs as the agent tests run them (tests/agents.rs,
//! tests/agents_mcp.rs): pinned in tests/agents/ and installed by
//! tests/setup.d/70-agents.sh, each run non-interactively in a throwaway
//! HOME against a base URL. Include it with `#[path =
//! "common/agent_cli.rs"] mod agent_cli;` next to `mod scripted_provider;`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

use crate::scripted_provider::Api;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Agent {
    ClaudeCode,
    Codex,
    GeminiCli,
    Pi,
    Opencode,
}

pub fn bin(name: &str) -> PathBuf {
    // opencode has a folder of its own (tests/setup.d/70-agents.sh says why).
    let folder = if name == "opencode" {
        "tests/agents/opencode"
    } else {
        "tests/agents"
    };
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(folder)
        .join("node_modules/.bin")
        .join(name);
    assert!(
        path.exists(),
        "the agent CLIs are not installed ({} is missing): run ./tests/setup.sh (or bash tests/setup.d/70-agents.sh)",
        path.display()
    );
    path
}

pub const PROMPT: &str = "Run the commands you are given, one at a time, then say you are done.";

impl Agent {
    pub fn name(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude-code",
            Agent::Codex => "codex",
            Agent::GeminiCli => "gemini-cli",
            Agent::Pi => "pi",
            Agent::Opencode => "opencode",
        }
    }

    pub fn api(self) -> Api {
        match self {
            Agent::ClaudeCode | Agent::Pi | Agent::Opencode => Api::Anthropic,
            Agent::Codex => Api::Responses,
            Agent::GeminiCli => Api::Gemini,
        }
    }

    /// The agent run non-interactively against `base` (the provider, or
    /// the proxy), in `home` (a throwaway HOME) and `cwd`, with telemetry,
    /// update checks and other network features off. These command lines
    /// are the ones docs/testing.md shows.
    pub fn command(self, base: &str, home: &Path, cwd: &Path) -> Command {
        let mut cmd;
        match self {
            Agent::ClaudeCode => {
                cmd = Command::new(bin("claude"));
                // Root may not pass --dangerously-skip-permissions; an
                // allowed tool list approves the shell tool alone.
                cmd.args(["-p", PROMPT, "--allowedTools", "Bash", "--max-turns", "60"])
                    .env("ANTHROPIC_BASE_URL", base)
                    .env("ANTHROPIC_API_KEY", "scripted")
                    .env("DISABLE_TELEMETRY", "1")
                    .env("DISABLE_AUTOUPDATER", "1")
                    .env("DISABLE_ERROR_REPORTING", "1")
                    .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
            }
            Agent::Codex => {
                // A model provider of its own: plain HTTP (no WebSocket
                // upgrade, which the built-in OpenAI provider tries first)
                // and retries enough to ride out a proxy restart.
                let provider = format!(
                    "model_providers.scripted={{name=\"scripted\",base_url=\"{base}/v1\",env_key=\"OPENAI_API_KEY\",wire_api=\"responses\",supports_websockets=false,request_max_retries=10,stream_max_retries=10}}"
                );
                std::fs::create_dir_all(home.join(".codex")).unwrap();
                cmd = Command::new(bin("codex"));
                cmd.args([
                    "exec",
                    "--skip-git-repo-check",
                    "--dangerously-bypass-approvals-and-sandbox",
                    "-c",
                    "model_provider=scripted",
                    "-c",
                    &provider,
                    "-c",
                    "model=gpt-5.5",
                    "-c",
                    "analytics.enabled=false",
                    "-c",
                    "check_for_update_on_startup=false",
                    PROMPT,
                ])
                .env("OPENAI_API_KEY", "scripted")
                .env("CODEX_HOME", home.join(".codex"));
            }
            Agent::GeminiCli => {
                let dir = home.join(".gemini");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(
                    dir.join("settings.json"),
                    r#"{"privacy": {"usageStatisticsEnabled": false}, "telemetry": {"enabled": false},
  "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
  "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}}}"#,
                )
                .unwrap();
                cmd = Command::new(bin("gemini"));
                cmd.args(["-p", PROMPT, "--yolo", "-m", "gemini-2.5-pro"])
                    .env("GOOGLE_GEMINI_BASE_URL", base)
                    .env("GEMINI_API_KEY", "scripted")
                    .env("GEMINI_CLI_TRUST_WORKSPACE", "true");
            }
            Agent::Pi => {
                // The built-in Anthropic provider, its base URL moved
                // (pi's docs/models.md, "Overriding Built-in Providers").
                let dir = home.join(".pi/agent");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(
                    dir.join("models.json"),
                    format!(r#"{{"providers": {{"anthropic": {{"baseUrl": "{base}"}}}}}}"#),
                )
                .unwrap();
                cmd = Command::new(bin("pi"));
                cmd.args([
                    "-p",
                    "--provider",
                    "anthropic",
                    "--model",
                    "claude-sonnet-4-5",
                    "--no-session",
                    "--offline",
                    PROMPT,
                ])
                .env("ANTHROPIC_API_KEY", "scripted")
                .env("PI_OFFLINE", "1");
            }
            Agent::Opencode => {
                let dir = home.join(".config/opencode");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(
                    dir.join("opencode.json"),
                    format!(
                        r#"{{"autoupdate": false, "share": "disabled", "snapshot": false,
  "provider": {{"anthropic": {{"options": {{"baseURL": "{base}/v1", "apiKey": "scripted"}}}}}}}}"#
                    ),
                )
                .unwrap();
                cmd = Command::new(bin("opencode"));
                cmd.args(["run", "--model", "anthropic/claude-sonnet-4-5", PROMPT])
                    .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
                    .env("OPENCODE_DISABLE_AUTOUPDATE", "1");
            }
        }
        // Loopback only: no system proxy between the agent and its base URL.
        for var in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            cmd.env_remove(var);
        }
        // Temporary files too stay in the throwaway HOME (Claude Code
        // writes under $TMPDIR/claude-<uid>, pi its jiti cache), so a run
        // leaves nothing behind in the suite's TMPDIR.
        let tmp = home.join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        cmd.env("NO_PROXY", "*")
            .env("TMPDIR", &tmp)
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_STATE_HOME", home.join(".local/state"))
            .env("CI", "1")
            .env("TERM", "dumb")
            .env("NO_COLOR", "1")
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }
}
