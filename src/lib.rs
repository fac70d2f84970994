//! toolwire: one process per workspace that keeps coding agents' tool
//! traffic valid and within budget.
//!
//! - **Budget**: `budget/apply` persists the largest fresh tool results to
//!   disk once and puts a stable `<persisted-output>` preview in their place;
//!   every decision is frozen and replayed byte for byte afterwards.
//! - **Pairing**: `pair/append` writes the session transcript and commits an
//!   assistant's tool calls only together with all their results.
//!
//! Clients speak JSON-RPC 2.0 with LSP framing over stdio (see PROTOCOL.md).
//! Nothing in this crate writes to stdout except the protocol writer.

#![deny(clippy::print_stdout)]

pub mod artifact;
pub mod budget;
pub mod client;
pub mod config;
pub mod daemon;
#[cfg(test)]
mod docs;
pub mod egress;
pub mod error;
pub mod format;
pub mod heap;
pub mod json;
pub mod logfile;
pub mod mcp;
pub mod methods;
pub mod private;
pub mod process;
pub mod protocol;
pub mod proxy;
pub mod replay;
pub mod retention;
pub mod schema;
pub mod server;
pub mod session;
pub mod state;
pub mod store;
pub mod transcript;
pub mod transport;
