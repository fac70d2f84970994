//! `toolwire repair`: rewrite a transcript so every tool call is followed
//! by all its results.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The transcript (JSON Lines) to repair; the original is kept as
    /// PATH.bak.
    path: PathBuf,
    /// Report what would change without writing.
    #[arg(long)]
    dry_run: bool,
}

#[allow(clippy::print_stdout)]
pub fn run(Args { path, dry_run }: Args) -> ExitCode {
    let path = path.as_path();
    match toolwire::transcript::repair::repair_file(path, dry_run) {
        Ok(report) => {
            let verb = if dry_run { "would keep" } else { "kept" };
            println!("{}: {verb} {} lines", path.display(), report.kept);
            for id in &report.dropped_tool_uses {
                println!("  dropped tool_use {id} (results missing)");
            }
            for id in &report.dropped_tool_results {
                println!("  dropped tool_result {id} (orphan, duplicate or partial)");
            }
            if report.torn_lines > 0 {
                println!("  dropped {} torn or unparsable lines", report.torn_lines);
            }
            if !dry_run && report != Default::default() {
                println!(
                    "  original kept as {}",
                    toolwire::transcript::repair::bak_path(path).display()
                );
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("toolwire repair: {err}");
            ExitCode::FAILURE
        }
    }
}
