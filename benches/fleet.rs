//! The shared store's cost, next to the local backend measured in the same
//! run:
//!
//!     cargo bench --bench fleet
//!
//! - decisions per second and p50/p99 latency of `budget/apply` with 8
//!   concurrent conversations, each call adding one 60 KB result (one new
//!   decision, earlier ones replayed): on the local backend (transcript
//!   files), on PostgreSQL with one replica, and with three replicas taking
//!   the calls round robin;
//! - the cost of a decision race: the same fresh decision asked of three
//!   replicas at once, against one replica deciding it alone.
//!
//! Replicas are in-process registries, each with its own connection pool,
//! on one real PostgreSQL server started by the bench (tests/common/pg.rs:
//! Debian's `postgresql`, a unix socket, fsync off); the local backend runs
//! with `durability = "none"` to match.

#[path = "../tests/common/pg.rs"]
mod pg;
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use toolwire::config::{Config, Durability, Effective};
use toolwire::protocol::{BudgetApplyParams, Message, SessionId};
use toolwire::session::{DEFAULT_SESSION_IDLE, Registry, Storage};

const CONVERSATIONS: usize = 8;
const CALLS: usize = 40;
const RACES: usize = 60;

fn replica(storage: Storage) -> Arc<Registry> {
    Arc::new(Registry::new(storage, DEFAULT_SESSION_IDLE))
}

fn postgres_replica(url: &str) -> Arc<Registry> {
    let store = toolwire::store::postgres::Postgres::connect(url, 16).unwrap();
    replica(Storage {
        shared: Some(Arc::new(store)),
        ..Storage::default()
    })
}

fn conversation(tag: &str, turns: usize) -> Vec<Message> {
    let mut messages = vec![Message(
        json!({"role": "user", "content": format!("go {tag}")}),
    )];
    for t in 0..turns {
        let id = format!("{tag}-{t}");
        messages.push(Message(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": id, "name": "Bash", "input": {}}]})));
        messages.push(Message(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": format!("{id} {}", "x".repeat(60_000))}]})));
    }
    messages
}

async fn apply(
    registry: &Registry,
    config: &Arc<Effective>,
    session: &str,
    messages: Vec<Message>,
) {
    let params = BudgetApplyParams {
        session_id: SessionId::try_from(session.to_owned()).unwrap(),
        messages,
        limits: None,
        preview_mode: None,
        tools: None,
        format: None,
        clearing: None,
        pricing: None,
        link_session: None,
    };
    let result = toolwire::methods::budget_apply_queued(registry, config.clone(), params)
        .await
        .unwrap();
    assert!(result.failures.is_empty());
}

struct Figures {
    decisions_per_sec: f64,
    p50: Duration,
    p99: Duration,
}

/// `CONVERSATIONS` conversations of `CALLS` calls each, call k of every
/// conversation going to replica k % replicas.
async fn load(replicas: &[Arc<Registry>], config: &Arc<Effective>, run: &str) -> Figures {
    let start = Instant::now();
    let tasks: Vec<_> = (0..CONVERSATIONS)
        .map(|c| {
            let replicas = replicas.to_vec();
            let config = config.clone();
            let session = format!("{run}-{c}");
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(CALLS);
                for k in 1..=CALLS {
                    let messages = conversation(&session, k);
                    let t = Instant::now();
                    apply(&replicas[k % replicas.len()], &config, &session, messages).await;
                    latencies.push(t.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    let elapsed = start.elapsed();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    Figures {
        decisions_per_sec: (CONVERSATIONS * CALLS) as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
    }
}

/// Mean time for a fresh decision on one replica alone, and for the same
/// fresh decision asked of every replica at once (until all have answered).
async fn race(replicas: &[Arc<Registry>], config: &Arc<Effective>) -> (Duration, Duration) {
    let mut alone = Duration::ZERO;
    let mut raced = Duration::ZERO;
    for i in 0..RACES {
        let messages = conversation(&format!("alone-{i}"), 1);
        let t = Instant::now();
        apply(&replicas[0], config, &format!("alone-{i}"), messages).await;
        alone += t.elapsed();

        let session = format!("race-{i}");
        let messages = conversation(&session, 1);
        let t = Instant::now();
        let all = replicas
            .iter()
            .map(|r| apply(r, config, &session, messages.clone()));
        futures_util::future::join_all(all).await;
        raced += t.elapsed();
    }
    (alone / RACES as u32, raced / RACES as u32)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    support::begin("fleet");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let config = Arc::new(toolwire::config::resolve(
        data.path(),
        Config {
            durability: Durability::None,
            ..Config::default()
        },
    ));
    let (url, _) = pg::migrated_database();
    rt.block_on(async {
        // Warm up both (connections, the page cache).
        let local = [replica(Storage::default())];
        let one = [postgres_replica(&url)];
        let three: Vec<_> = (0..3).map(|_| postgres_replica(&url)).collect();
        load(&local, &config, "warm-local").await;
        load(&one, &config, "warm-pg").await;

        let local_f = load(&local, &config, "local").await;
        let one_f = load(&one, &config, "pg1").await;
        let three_f = load(&three, &config, "pg3").await;
        let (alone, raced) = race(&three, &config).await;

        println!(
            "budget/apply, {CONVERSATIONS} concurrent conversations x {CALLS} calls, one new 60 KB result per call:"
        );
        for (name, f) in [
            ("local (files)", &local_f),
            ("postgres, 1 replica", &one_f),
            ("postgres, 3 replicas", &three_f),
        ] {
            println!(
                "  {name:<22} {:>8.0} decisions/s  p50 {:>9}  p99 {:>9}  ({:.2}x local throughput, p99 {:.2}x local)",
                f.decisions_per_sec,
                ms(f.p50),
                ms(f.p99),
                f.decisions_per_sec / local_f.decisions_per_sec,
                f.p99.as_secs_f64() / local_f.p99.as_secs_f64(),
            );
        }
        println!(
            "decision race ({RACES} trials): one replica alone {}, three replicas racing {} ({:.2}x)",
            ms(alone),
            ms(raced),
            raced.as_secs_f64() / alone.as_secs_f64()
        );
        let rate = |f: &Figures| {
            format!(
                "{:.0} /s (p99 {})",
                f.decisions_per_sec,
                ms(f.p99)
            )
        };
        support::record(support::Row {
            bench: "fleet",
            figure: format!(
                "`budget/apply` decisions/s, {CONVERSATIONS} conversations × {CALLS} calls of 60 KB: postgres 1 replica / 3 replicas"
            ),
            toolwire: format!("{} / {}", rate(&one_f), rate(&three_f)),
            baseline: format!("{}: local files", rate(&local_f)),
            ratio: format!(
                "{:.2} / {:.2}×",
                one_f.decisions_per_sec / local_f.decisions_per_sec,
                three_f.decisions_per_sec / local_f.decisions_per_sec
            ),
            target: "report".into(),
            holds: None,
        });
        support::record(support::Row {
            bench: "fleet",
            figure: format!("a decision raced by three replicas ({RACES} trials)"),
            toolwire: ms(raced),
            baseline: format!("{}: one replica alone", ms(alone)),
            ratio: support::x(raced.as_secs_f64() / alone.as_secs_f64()),
            target: "report".into(),
            holds: None,
        });
    });
    rt.shutdown_timeout(Duration::from_secs(5));
}
