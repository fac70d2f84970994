//! One file per `toolwire` subcommand: its arguments (clap) and its `run`.
//!
//! Adding a command is a file here and one variant in `main.rs`.

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
