//! `toolwire show SESSION TOOL_USE_ID [--lines A:B] [--grep RE]`: print a
//! saved output, a range of its lines, or the lines matching a pattern
//! (numbered, as `grep -n`). The same reads as `artifact/read`, from the
//! workspace's data directory.

use super::ForCli;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use toolwire::artifact::read::{self, ReadRequest};
use toolwire::protocol::SessionId;

#[derive(clap::Args)]
pub struct Args {
    /// The session id the output was saved in.
    session: String,
    /// The tool_use id of the saved output.
    tool_use_id: String,
    /// Lines A to B, 1-based and inclusive as `sed -n A,Bp` (`A:` to the end).
    #[arg(long, value_name = "A:B", conflicts_with = "grep")]
    lines: Option<String>,
    /// Show the lines matching this regular expression, numbered.
    #[arg(long, value_name = "RE")]
    grep: Option<String>,
    /// With --grep: lines of context around each match.
    #[arg(short = 'C', long, default_value_t = 0, requires = "grep")]
    context: u64,
    /// The workspace whose data directory to read (default: the current
    /// directory; its toolwire.toml is honoured).
    #[arg(long)]
    workspace: Option<PathBuf>,
}

/// `A:B` (1-based, inclusive) as a 0-based offset and an optional count.
fn parse_lines(spec: &str) -> Result<(u64, Option<u64>), String> {
    let bad = || format!("--lines {spec}: expected A:B, A: or :B with 1 <= A <= B");
    let (a, b) = spec.split_once(':').ok_or_else(bad)?;
    let a: u64 = if a.is_empty() {
        1
    } else {
        a.parse().map_err(|_| bad())?
    };
    let b: Option<u64> = if b.is_empty() {
        None
    } else {
        Some(b.parse().map_err(|_| bad())?)
    };
    if a == 0 || b.is_some_and(|b| b < a) {
        return Err(bad());
    }
    Ok((a - 1, b.map(|b| b - a + 1)))
}

pub fn run(args: Args) -> ExitCode {
    match show(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("toolwire show: {err}");
            ExitCode::FAILURE
        }
    }
}

#[allow(clippy::print_stdout)]
fn show(args: Args) -> Result<ExitCode, String> {
    let session = SessionId::try_from(args.session)?;
    let workspace = args
        .workspace
        .map_or_else(std::env::current_dir, Ok)
        .map_err(|err| format!("no workspace directory: {err}"))?;
    let config = toolwire::config::load(&workspace, None).map_err(|err| err.for_cli())?;
    let (mut offset, mut remaining) = match &args.lines {
        Some(spec) => parse_lines(spec)?,
        None => (0, None),
    };
    let mut out = std::io::stdout().lock();
    // Page through: each reply is bounded, the output is not.
    loop {
        let request = ReadRequest {
            offset,
            limit: Some(
                remaining
                    .unwrap_or(read::DEFAULT_LIMIT)
                    .min(read::DEFAULT_LIMIT),
            ),
            grep: args.grep.clone(),
            context: args.context,
        };
        let page = read::read_artifact(
            &config.data_dir,
            config.storage.objects.as_ref(),
            &session,
            &args.tool_use_id,
            &request,
            config.size_unit,
        )
        .map_err(|err| match err {
            // Say where it looked: a wrong directory (another workspace, a
            // data_dir set elsewhere) is the usual reason nothing is found.
            toolwire::error::Error::ArtifactNotFound { .. } => format!(
                "{}; searched the data directory {}{} (--workspace DIR reads another workspace's)",
                err.for_cli(),
                config.data_dir.display(),
                match &config.storage.objects {
                    Some(objects) => format!(" and {}", objects.url),
                    None => String::new(),
                }
            ),
            other => other.for_cli(),
        })?;
        if let Err(err) = out.write_all(page.text.as_bytes()) {
            // A closed pipe (`| head`) ends the output, not in failure.
            if err.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(ExitCode::SUCCESS);
            }
            return Err(err.to_string());
        }
        if args.grep.is_none() {
            remaining = remaining.map(|r| r - (page.end_line - page.start_line));
        }
        let done = !page.truncated || page.end_line <= offset || remaining == Some(0);
        offset = page.end_line;
        if done {
            break;
        }
    }
    out.flush().map_err(|err| err.to_string())?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::parse_lines;

    #[test]
    fn line_specs_are_one_based_and_inclusive() {
        assert_eq!(parse_lines("1:1"), Ok((0, Some(1))));
        assert_eq!(parse_lines("10:20"), Ok((9, Some(11))));
        assert_eq!(parse_lines("5:"), Ok((4, None)));
        assert_eq!(parse_lines(":3"), Ok((0, Some(3))));
        for bad in ["0:3", "4:3", "x:1", "3", ""] {
            assert!(parse_lines(bad).is_err(), "{bad}");
        }
    }
}
