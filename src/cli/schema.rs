//! `toolwire schema`: write the JSON Schemas and the OpenRPC document, or
//! check a directory against them.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Directory to write into.
    #[arg(long, value_name = "DIR", required_unless_present = "check")]
    out: Option<PathBuf>,
    /// Exit non-zero, showing the difference, when DIR is stale.
    #[arg(long, value_name = "DIR", conflicts_with = "out")]
    check: Option<PathBuf>,
}

pub fn run(Args { out, check }: Args) -> ExitCode {
    if let Some(dir) = check {
        let problems = match toolwire::schema::check(&dir) {
            Ok(problems) => problems,
            Err(err) => {
                eprintln!("toolwire schema --check: {err}");
                return ExitCode::FAILURE;
            }
        };
        if problems.is_empty() {
            super::say!("{}: up to date", dir.display());
            return ExitCode::SUCCESS;
        }
        for p in &problems {
            eprintln!("{p}");
        }
        eprintln!(
            "{} is stale: run `toolwire schema --out {}`",
            dir.display(),
            dir.display()
        );
        return ExitCode::FAILURE;
    }
    let Some(dir) = out else {
        return ExitCode::FAILURE;
    };
    match toolwire::schema::write(&dir) {
        Ok(n) => {
            super::say!("wrote {n} files to {}", dir.display());
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("toolwire schema --out: {err}");
            ExitCode::FAILURE
        }
    }
}
