//! A `toolwire proxy` two tenants share (PROTOCOL.md 12.3): alice and bob,
//! each with a token, in front of a fake provider, on the local store, on
//! PostgreSQL, or on PostgreSQL with saved outputs on an S3-compatible
//! server. Include it with `#[path = "common/tenants.rs"] mod tenants;`
//! beside `mod fake_provider;` and `proxy_process`.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use crate::fake_provider::FakeProvider;
use crate::proxy_process;
use serde_json::Value;

pub const ALICE: &str = "tok-alice-0c1d2e";
pub const BOB: &str = "tok-bob-9f8e7d";

/// `[proxy.auth]` for alice and bob.
pub fn auth_toml() -> String {
    format!(
        "[proxy.auth]\ntokens = [{{ name = \"alice\", sha256 = \"{}\" }}, {{ name = \"bob\", sha256 = \"{}\" }}]\n",
        proxy_process::sha256_hex(ALICE),
        proxy_process::sha256_hex(BOB)
    )
}

/// Where the proxy keeps sessions and saved outputs.
#[derive(Clone, Copy)]
pub enum Store<'a> {
    /// Transcript files and saved outputs under the workspace.
    Local,
    /// PostgreSQL (the database's URL), saved outputs under the workspace.
    Postgres(&'a str),
    /// PostgreSQL, saved outputs in a bucket (`storage.objects` as
    /// `s3::S3Server::objects_config` gives it).
    Shared { db: &'a str, objects: &'a Value },
}

impl Store<'_> {
    /// The store's `[storage]` tables.
    pub fn toml(&self) -> String {
        let postgres = |db: &str| {
            format!("[storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {db:?}\n")
        };
        match self {
            Store::Local => String::new(),
            Store::Postgres(db) => postgres(db),
            Store::Shared { db, objects } => {
                let o = &objects["options"];
                format!(
                    "{}[storage.objects]\nurl = {url:?}\n[storage.objects.options]\nendpoint = {endpoint:?}\n\
                     region = \"us-east-1\"\nallow_http = true\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\n",
                    postgres(db),
                    url = objects["url"].as_str().unwrap(),
                    endpoint = o["endpoint"].as_str().unwrap(),
                )
            }
        }
    }
}

/// A running proxy: its URL, its workspace and everything it logged.
pub struct Proxy {
    _child: tokio::process::Child,
    pub url: String,
    pub ws: tempfile::TempDir,
    pub log: Arc<Mutex<String>>,
}

/// A proxy with alice and bob as tenants, in front of `fake` (every
/// provider's upstream), on `store`, with `[proxy]` settings `proxy`
/// (lines of the table, may be empty), logging at `log`.
pub async fn start(fake: &FakeProvider, store: Store<'_>, proxy: &str, log: &str) -> Proxy {
    start_with(
        &format!(
            "[proxy]\n{proxy}\n{auth}{storage}\
             [proxy.upstreams]\nanthropic = \"{up}\"\nopenai = \"{up}\"\ngemini = \"{up}\"\n",
            auth = auth_toml(),
            storage = store.toml(),
            up = fake.url(),
        ),
        log,
    )
    .await
}

/// A proxy on loopback whose toolwire.toml (clearing off, no fsync) ends
/// with `toml`, logging at `log`.
pub async fn start_with(toml: &str, log: &str) -> Proxy {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("toolwire.toml"),
        format!("durability = \"none\"\n[clearing]\nmode = \"off\"\n{toml}"),
    )
    .unwrap();
    let (child, url, lines) =
        proxy_process::start(ws.path(), &["--listen", "127.0.0.1:0"], log, "proxy").await;
    Proxy {
        _child: child,
        url,
        ws,
        log: proxy_process::keep_log(lines),
    }
}
