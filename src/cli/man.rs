//! `toolwire man`: the manual pages, generated from the clap definition
//! (`clap_mangen`) so they always match the binary; nothing is checked in.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Write toolwire.1 and one toolwire-COMMAND.1 page per command into
    /// DIR (for example ~/.local/share/man/man1) instead of printing
    /// toolwire(1) on stdout.
    #[arg(long, value_name = "DIR", value_parser = super::existing_dir)]
    out: Option<PathBuf>,
}

pub fn run(Args { out }: Args, cmd: clap::Command) -> ExitCode {
    match out {
        Some(dir) => match clap_mangen::generate_to(cmd, &dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("toolwire man --out: {}: {err}", dir.display());
                ExitCode::FAILURE
            }
        },
        None => {
            let mut page = Vec::new();
            match clap_mangen::Man::new(cmd).render(&mut page) {
                Ok(()) => super::write_stdout(&page),
                Err(err) => {
                    eprintln!("toolwire man: {err}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
