//! `toolwire stats`: what the proxy did, per session.

use super::ForCli;
use std::process::ExitCode;

use toolwire::proxy::stats::{self, SessionStats};

#[derive(clap::Args)]
pub struct Args {
    /// Only this session.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Print JSON (an array of sessions) instead of a table.
    #[arg(long)]
    json: bool,
}

#[allow(clippy::print_stdout)]
pub fn run(args: Args) -> ExitCode {
    let outcome = std::env::current_dir()
        .map_err(|err| format!("no workspace directory: {err}"))
        .and_then(|dir| toolwire::config::load(&dir, None).map_err(|err| err.for_cli()))
        .and_then(|config| {
            // Committed lines a power loss left in the commit log only go
            // back into their transcripts first.
            toolwire::transcript::wal::open(&config.data_dir)
                .map_err(|err| format!("{}: commit log: {err}", config.data_dir.display()))?;
            stats::collect(&config.data_dir, args.session.as_deref())
                .map_err(|err| format!("{}: {err}", config.data_dir.display()))
        });
    let sessions = match outcome {
        Ok(sessions) => sessions,
        Err(err) => {
            eprintln!("toolwire stats: {err}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(id) = &args.session
        && sessions.is_empty()
    {
        eprintln!("toolwire stats: no proxy requests recorded for session {id}");
        return ExitCode::FAILURE;
    }
    if args.json {
        match serde_json::to_string_pretty(&sessions) {
            Ok(text) => println!("{text}"),
            Err(err) => {
                eprintln!("toolwire stats: {err}");
                return ExitCode::FAILURE;
            }
        }
    } else if sessions.is_empty() {
        println!("no proxy requests recorded yet");
    } else {
        for s in &sessions {
            print_session(s);
        }
    }
    ExitCode::SUCCESS
}

#[allow(clippy::print_stdout)]
fn print_session(s: &SessionStats) {
    let saved = s.chars_received.saturating_sub(s.chars_sent);
    let rate = s
        .cache_hit_rate
        .map_or("n/a".to_owned(), |r| format!("{:.1}%", r * 100.0));
    println!("session {}", s.session_id);
    println!(
        "  requests           {} ({} repaired)",
        s.requests, s.repaired_requests
    );
    println!("  chars received     {}", s.chars_received);
    println!("  chars sent         {} ({saved} saved)", s.chars_sent);
    println!("  results persisted  {}", s.results_persisted);
    println!("  results cleared    {}", s.results_cleared);
    println!(
        "  tokens             input {}, cache read {}, cache creation {}, output {}",
        s.tokens.input, s.tokens.cache_read, s.tokens.cache_creation, s.tokens.output
    );
    println!("  cache hit rate     {rate}");
    if s.requests_without_usage > 0 {
        println!("  without usage      {} requests", s.requests_without_usage);
    }
}
