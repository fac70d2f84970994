//! One file per `toolwire` subcommand: its arguments (clap) and its `run`.
//!
//! Adding a command is a file here and one variant in `main.rs`.

pub mod import;
pub mod repair;
pub mod replay;
pub mod schema;
pub mod serve;
pub mod show;

/// The multi-threaded runtime every async command runs on.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
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
