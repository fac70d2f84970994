//! `toolwire check`: say whether the provider would accept a transcript's
//! tool calls and results; exit 1 when it would not.

use super::ForCli;
use std::path::PathBuf;
use std::process::ExitCode;

use toolwire::format::Format;

#[derive(clap::Args)]
pub struct Args {
    /// The transcript to check (JSON Lines).
    path: PathBuf,
    /// The provider format (default: the transcript's `session` line, else
    /// what its content shows, else anthropic).
    #[arg(long, value_enum)]
    format: Option<FormatArg>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum FormatArg {
    Anthropic,
    OpenaiChat,
    OpenaiResponses,
    Gemini,
}

impl From<FormatArg> for Format {
    fn from(arg: FormatArg) -> Format {
        match arg {
            FormatArg::Anthropic => Format::Anthropic,
            FormatArg::OpenaiChat => Format::OpenaiChat,
            FormatArg::OpenaiResponses => Format::OpenaiResponses,
            FormatArg::Gemini => Format::Gemini,
        }
    }
}

pub fn run(Args { path, format }: Args) -> ExitCode {
    if let Err(err) = super::check_workspace_config() {
        eprintln!("toolwire check: {err}");
        return ExitCode::from(2);
    }
    match toolwire::transcript::check::check_file(format.map(Format::from), &path) {
        Ok(result) if result.ok => {
            super::say!("{}: ok", path.display());
            ExitCode::SUCCESS
        }
        Ok(result) => {
            super::say!(
                "{}: {} violation(s) the provider would refuse",
                path.display(),
                result.violations.len()
            );
            for v in &result.violations {
                super::say!("  message {} {}: {}", v.index, v.kind, v.provider_error);
            }
            ExitCode::from(1)
        }
        Err(err) => {
            eprintln!("toolwire check: {}", err.for_cli());
            ExitCode::from(2)
        }
    }
}
