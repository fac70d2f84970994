//! A proxy a team can operate (PROTOCOL.md 12.3): `/metrics` scraped by a
//! real Prometheus (Debian's `prometheus`, `.ci/apt/ops.txt`) started here
//! on loopback, its figures checked against what the fake provider
//! reported and `toolwire stats` says; `/healthz` and `/readyz`, the latter
//! following a real PostgreSQL as it stops and starts again. Its own test
//! binary, since stopping the process's PostgreSQL touches every database
//! of the process.

#[path = "common/agent_py.rs"]
mod agent_py;
mod common;
mod fake_provider;
#[path = "common/proxy_process.rs"]
mod proxy_process;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fake_provider::FakeProvider;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

/// The token Prometheus scrapes with; the proxy holds only its digest.
const SCRAPE_TOKEN: &str = "scrape-7f3a9c";

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A free loopback port (bound, read, released: Prometheus takes it next).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A Prometheus server scraping `target` every second, in a temporary
/// directory, killed when dropped.
struct Prometheus {
    child: tokio::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    async fn start(target: &str, token: &str) -> Prometheus {
        let bin = Path::new("/usr/bin/prometheus");
        assert!(
            bin.exists(),
            "Prometheus is not installed: run `apt-get install -y prometheus` (.ci/apt/ops.txt)"
        );
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: toolwire\n    metrics_path: /metrics\n\
                 \x20   authorization:\n      credentials: {token}\n\
                 \x20   static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let child = tokio::process::Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("log")).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let prometheus = Prometheus {
            child,
            url,
            _dir: dir,
        };
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = http
                .get(format!("{}/-/ready", prometheus.url))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return prometheus;
            }
            assert!(
                Instant::now() < deadline,
                "Prometheus was not ready within 60 s:\n{}",
                std::fs::read_to_string(prometheus._dir.path().join("log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The value of an instant query that yields one number, if it has one.
    async fn value(&self, query: &str) -> Option<f64> {
        let body: Value = reqwest::Client::new()
            .get(format!("{}/api/v1/query", self.url))
            .query(&[("query", query)])
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        assert_eq!(body["status"], "success", "{query}: {body}");
        body["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }

    /// Wait until `query` yields `want` (a scrape a second, so a bounded
    /// wait on a state); panics with the last value otherwise.
    async fn wait_for(&self, query: &str, want: f64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let got = self.value(query).await;
            if got == Some(want) {
                return;
            }
            if Instant::now() > deadline {
                let all: Value = reqwest::Client::new()
                    .get(format!("{}/api/v1/query", self.url))
                    .query(&[("query", "{__name__=~\"toolwire_proxy_.*_total\"}")])
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                panic!("{query}: Prometheus says {got:?}, expected {want}; it has {all}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn sum(stats: &[Value], pointer: &str) -> u64 {
    stats
        .iter()
        .map(|s| s.pointer(pointer).and_then(Value::as_u64).unwrap())
        .sum()
}

/// A proxy on a loopback port of its own in a new workspace with `toml`
/// as its toolwire.toml: the process (killed when dropped), its URL, the
/// workspace. Its log is drained so it never blocks on a full pipe.
async fn start_proxy(toml: &str) -> (tokio::process::Child, String, tempfile::TempDir) {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("toolwire.toml"), toml).unwrap();
    let (child, url, mut lines) = proxy_process::start(
        ws.path(),
        &["--listen", "127.0.0.1:0"],
        "toolwire=warn",
        "proxy",
    )
    .await;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url, ws)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_what_the_provider_reported_and_stats_says() {
    let fake = FakeProvider::start().await;
    let (_proxy, url, ws) = start_proxy(&format!(
        "durability = \"none\"\n[clearing]\nmode = \"off\"\n\
         [proxy]\nmetrics_token = \"{digest}\"\n\
         [proxy.upstreams]\nanthropic = \"{up}\"\nopenai = \"{up}\"\ngemini = \"{up}\"\n",
        digest = sha256_hex(SCRAPE_TOKEN),
        up = fake.url(),
    ))
    .await;
    let http = reqwest::Client::new();
    // Without the token, no metrics; with it (as Prometheus sends it), the
    // OpenMetrics text.
    let r = http.get(format!("{url}/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = http
        .get(format!("{url}/metrics"))
        .bearer_auth("not-it")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    let target = url.trim_start_matches("http://");
    let prometheus = Prometheus::start(target, SCRAPE_TOKEN).await;

    // Two agents through the official SDKs, one of them streaming.
    agent_py::run(&["anthropic", &url, "loop", "--turns", "6"]).await;
    agent_py::run(&["openai-chat", &url, "loop", "--turns", "4"]).await;
    // And one refusal the proxy answers itself.
    let r = http
        .post(format!("{url}/v1/nowhere"))
        .header("x-api-key", "k")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    let received = fake.received();
    assert_eq!(received.len(), 10);
    let provider_cache_read: u64 = received.iter().map(|r| r.cache_read).sum();
    let stats = proxy_process::stats(ws.path());
    assert_eq!(sum(&stats, "/requests"), 10);
    assert_eq!(sum(&stats, "/tokens/cacheRead"), provider_cache_read);
    let persisted = sum(&stats, "/resultsPersisted");
    assert!(
        persisted > 0,
        "the loops' large results were saved: {stats:?}"
    );

    prometheus.wait_for("up{job=\"toolwire\"}", 1.0).await;
    prometheus
        .wait_for("sum(toolwire_proxy_requests_total{outcome=\"ok\"})", 10.0)
        .await;
    prometheus
        .wait_for(
            "sum(toolwire_proxy_requests_total{provider=\"anthropic\",route=\"anthropic\"})",
            6.0,
        )
        .await;
    prometheus
        .wait_for(
            "sum(toolwire_proxy_input_tokens_total{kind=\"cache_read\"})",
            provider_cache_read as f64,
        )
        .await;
    prometheus
        .wait_for(
            "sum(toolwire_proxy_results_persisted_total)",
            persisted as f64,
        )
        .await;
    prometheus
        .wait_for("sum(toolwire_proxy_errors_total{kind=\"no_route\"})", 1.0)
        .await;
    prometheus
        .wait_for("sum(toolwire_proxy_added_latency_seconds_count)", 10.0)
        .await;
    // Budgeting shrank what left: fewer bytes sent than received.
    let received_bytes = prometheus
        .value("sum(toolwire_proxy_received_bytes_total)")
        .await
        .unwrap();
    let sent_bytes = prometheus
        .value("sum(toolwire_proxy_sent_bytes_total)")
        .await
        .unwrap();
    assert!(
        sent_bytes < received_bytes,
        "sent {sent_bytes}, received {received_bytes}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_postgresql_and_healthz_the_process() {
    let fake = FakeProvider::start().await;
    let (db, _store) = common::pg::migrated_database();
    let data = tempfile::tempdir().unwrap();
    let (_proxy, url, _ws) = start_proxy(&format!(
        "data_dir = {data:?}\ndurability = \"none\"\n\
         [proxy.upstreams]\nanthropic = {up:?}\nopenai = {up:?}\ngemini = {up:?}\n\
         [storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {db:?}\n",
        data = data.path().display().to_string(),
        up = fake.url(),
    ))
    .await;
    let http = reqwest::Client::new();
    let get = |path: &str| {
        let request = http.get(format!("{url}{path}"));
        async move {
            let r = request.send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    assert_eq!(get("/healthz").await.0, 200);
    let (status, body) = get("/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("store: ok"), "{body}");
    // A conversation goes through while the database is up.
    let turn = json!({"model": "m", "max_tokens": 8, "messages": [
        {"role": "user", "content": "hi"}]});
    let r = http
        .post(format!("{url}/v1/messages"))
        .header("x-api-key", "k")
        .header("anthropic-version", "2023-06-01")
        .json(&turn)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());

    common::pg::stop_server();
    let (status, body) = get("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("store: failed"), "{body}");
    assert!(body.contains("anthropic: ok"), "{body}");
    assert_eq!(get("/healthz").await.0, 200, "the process is still up");

    common::pg::start_server_again();
    // The pool reconnects on the next check; a bounded wait on the state.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = get("/readyz").await;
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "still unready: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_names_an_upstream_whose_name_does_not_resolve() {
    let (_proxy, url, _ws) = start_proxy(
        "durability = \"none\"\n[proxy.upstreams]\n\
     anthropic = \"http://127.0.0.1:9\"\nopenai = \"http://127.0.0.1:9\"\n\
     gemini = \"http://no-such-host.invalid\"\n",
    )
    .await;
    let r = reqwest::get(format!("{url}/readyz")).await.unwrap();
    assert_eq!(r.status(), 503);
    let body = r.text().await.unwrap();
    assert!(
        body.contains("gemini: failed (no-such-host.invalid"),
        "{body}"
    );
    assert!(body.contains("anthropic: ok"), "{body}");
}
