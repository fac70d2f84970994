//! `toolwire repair`: rewrite a transcript so the provider accepts it,
//! keeping every real result; a valid transcript is left untouched.

use super::ForCli;
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
    /// The provider format (default: the transcript's `session` line, else
    /// what its content shows, else anthropic).
    #[arg(long, value_enum)]
    format: Option<super::check::FormatArg>,
}

pub fn run(
    Args {
        path,
        dry_run,
        format,
    }: Args,
) -> ExitCode {
    if let Err(err) = super::check_workspace_config() {
        eprintln!("toolwire repair: {err}");
        return ExitCode::FAILURE;
    }
    // Before reading the file: a transcript of an older version's data
    // directory is closed first, and its repair and `.bak` keep that mode.
    let _ = super::prepare_data_dir();
    let path = path.as_path();
    let format = format.map(toolwire::format::Format::from);
    match toolwire::transcript::repair::repair_file(path, format, dry_run) {
        Ok(report) if !report.changed => {
            super::say!(
                "{}: valid, nothing to change ({} lines kept as they are)",
                path.display(),
                report.kept
            );
            ExitCode::SUCCESS
        }
        Ok(report) => {
            let verb = if dry_run { "would keep" } else { "kept" };
            super::say!("{}: {verb} {} lines", path.display(), report.kept);
            for id in &report.dropped_tool_uses {
                super::say!("  dropped tool_use {id} (no result in the next turn)");
            }
            for id in &report.dropped_tool_results {
                super::say!(
                    "  dropped tool_result {id} (answers no call of the turn before, a second result, or in the wrong role)"
                );
            }
            for id in &report.moved_tool_results {
                super::say!("  moved tool_result {id} ahead of the rest of its turn");
            }
            for renamed in &report.renamed_tool_uses {
                super::say!(
                    "  renamed tool_use {} to {} with its results (the provider's id rules)",
                    renamed.from,
                    renamed.to
                );
            }
            if report.torn_lines > 0 {
                super::say!("  dropped {} torn or unparsable lines", report.torn_lines);
            }
            if !dry_run {
                super::say!(
                    "  original kept as {}",
                    toolwire::transcript::repair::bak_path(path).display()
                );
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("toolwire repair: {}", err.for_cli());
            ExitCode::FAILURE
        }
    }
}
