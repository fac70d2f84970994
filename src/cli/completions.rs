//! `toolwire completions SHELL`: the shell completion script, generated
//! from the same clap definition the binary parses with (`clap_complete`),
//! so it always knows every command and flag.

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

pub fn run(Args { shell }: Args, mut cmd: clap::Command) -> ExitCode {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "toolwire", &mut out);
    super::write_stdout(&out)
}
