//! One file per `toolwire` subcommand: its arguments (clap) and its `run`.
//!
//! Adding a command is a file here and one variant in `main.rs`.

pub mod check;
pub mod completions;
pub mod gc;
pub mod import;
pub mod man;
pub mod mcp;
pub mod migrate;
pub mod proxy;
pub mod repair;
pub mod replay;
pub mod run;
pub mod schema;
pub mod serve;
pub mod show;
pub mod stats;

/// How a command names an error to a person at a terminal.
pub trait ForCli {
    fn for_cli(&self) -> String;
}

impl ForCli for toolwire::error::Error {
    /// The error as a person at a terminal reads it. A JSON-RPC client is
    /// told "invalid params at `path`" because the path names a field of
    /// its request; on the command line there is no request, and a bad
    /// file, flag or configuration key is already named in the message
    /// (a file's path, `toolwire.toml`'s file and line). So the framing is
    /// left out, and a field's name is kept only where the message alone
    /// would not say what it is about (`grep: regex parse error …`).
    fn for_cli(&self) -> String {
        match self {
            toolwire::error::Error::InvalidParams { path, message }
                if path == "path" || path.starts_with(toolwire::config::CONFIG_FILE) =>
            {
                message.clone()
            }
            toolwire::error::Error::InvalidParams { path, message } => format!("{path}: {message}"),
            other => other.to_string(),
        }
    }
}

/// The multi-threaded runtime every async command runs on.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    toolwire::process::runtime()
}

/// A clap value parser for a directory that must exist, so a mistyped path
/// is refused with its name before anything starts.
pub fn existing_dir(arg: &str) -> Result<std::path::PathBuf, String> {
    let path = std::path::PathBuf::from(arg);
    match std::fs::metadata(&path) {
        Ok(meta) if meta.is_dir() => Ok(path),
        Ok(_) => Err("not a directory".into()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Err("no such directory".into()),
        Err(err) => Err(err.to_string()),
    }
}

/// The current directory's workspace configuration, for commands that do
/// not otherwise need it (`check`, `repair`): a broken `toolwire.toml` is
/// refused by every command alike, rather than found later by the one
/// that reads it.
pub fn check_workspace_config() -> Result<(), String> {
    let workspace =
        std::env::current_dir().map_err(|err| format!("no workspace directory: {err}"))?;
    toolwire::config::load(&workspace, None)
        .map(drop)
        .map_err(|err| err.for_cli())
}

/// The workspace's data directory brought to private modes with its
/// `.gitignore` (PROTOCOL.md 12.2), for the commands that write files
/// without opening a store (`repair`, `import`). A workspace whose
/// configuration does not load has no data directory to speak of here;
/// the command itself reports that configuration where it matters.
pub fn prepare_data_dir() -> Option<std::path::PathBuf> {
    let workspace = std::env::current_dir().ok()?;
    let config = toolwire::config::load(&workspace, None).ok()?;
    toolwire::private::prepare(&config.data_dir);
    Some(config.data_dir)
}

/// Write a command's whole output to stdout. A reader that went away (a
/// closed pipe: `toolwire man | head`) is not an error worth a message.
pub fn write_stdout(bytes: &[u8]) -> std::process::ExitCode {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("toolwire: writing to stdout: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Print a line to stdout; a closed stdout (`toolwire … | head`) is not an
/// error. Rust ignores `SIGPIPE`, so writing to a closed pipe fails with
/// `EPIPE`, which `println!` turns into a panic. A command's work is done
/// before it reports, so when nobody reads the report any more it ends
/// quietly, with the status it would have had.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}
pub(crate) use say;
