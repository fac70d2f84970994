//! `toolwire migrate`: create or upgrade the shared store's schema
//! (`storage.backend = "postgres"` in toolwire.toml). Idempotent; replicas
//! may run it at once (an advisory lock makes one apply, the others wait
//! and find nothing left to do).

use super::ForCli;
use std::path::PathBuf;
use std::process::ExitCode;

use super::{runtime, say};

#[derive(clap::Args)]
pub struct Args {
    /// The workspace whose toolwire.toml names the database (default: the
    /// current directory).
    #[arg(long, value_parser = super::existing_dir)]
    workspace: Option<PathBuf>,
}

pub fn run(args: Args) -> ExitCode {
    match migrate(args) {
        Ok(applied) if applied.is_empty() => {
            say!("schema up to date");
            ExitCode::SUCCESS
        }
        Ok(applied) => {
            for version in applied {
                say!("applied migration {version}");
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("toolwire migrate: {err}");
            ExitCode::FAILURE
        }
    }
}

fn migrate(args: Args) -> Result<Vec<i32>, String> {
    let workspace = args
        .workspace
        .map_or_else(std::env::current_dir, Ok)
        .map_err(|err| format!("no workspace directory: {err}"))?;
    let config = toolwire::config::load(&workspace, None).map_err(|err| err.for_cli())?;
    let Some(pg) = toolwire::store::postgres_of(&config.storage).map_err(|e| e.for_cli())? else {
        return Err(
            "storage.backend is \"local\": there is no schema to migrate (set storage.backend = \"postgres\" and storage.postgres.url in toolwire.toml)".into(),
        );
    };
    let rt = runtime().map_err(|err| format!("cannot start the runtime: {err}"))?;
    rt.block_on(pg.migrate()).map_err(|err| err.for_cli())
}
