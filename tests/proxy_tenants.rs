//! A proxy a team shares (PROTOCOL.md 12.3): tenants by token, through the
//! real binary with the official SDKs (tests/proxy/.venv) and a fake
//! provider, on the local store and on a real PostgreSQL. Each tenant gets
//! its own sessions and previews, whatever session id it picks; a request
//! without a valid token is answered 401 in the provider's shape and
//! reaches no upstream; tokens never reach a log or the provider.

#[path = "common/agent_py.rs"]
mod agent_py;
mod common;
mod fake_provider;
#[path = "common/proxy_process.rs"]
mod proxy_process;

use std::sync::{Arc, Mutex};

use fake_provider::FakeProvider;
use proxy_process::sha256_hex;
use serde_json::{Value, json};

const ALICE: &str = "tok-alice-0c1d2e";
const BOB: &str = "tok-bob-9f8e7d";

/// `[proxy.auth]` for alice and bob.
fn auth_toml() -> String {
    format!(
        "[proxy.auth]\ntokens = [{{ name = \"alice\", sha256 = \"{}\" }}, {{ name = \"bob\", sha256 = \"{}\" }}]\n",
        sha256_hex(ALICE),
        sha256_hex(BOB)
    )
}

struct Proxy {
    _child: tokio::process::Child,
    url: String,
    ws: tempfile::TempDir,
    log: Arc<Mutex<String>>,
}

/// A proxy with alice and bob as tenants, in front of `fake`, on the
/// local store or on PostgreSQL (`db`), logging everything.
async fn start(fake: &FakeProvider, db: Option<&str>) -> Proxy {
    let ws = tempfile::tempdir().unwrap();
    let storage = db.map_or_else(String::new, |db| {
        format!("[storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {db:?}\n")
    });
    std::fs::write(
        ws.path().join("toolwire.toml"),
        format!(
            "durability = \"none\"\n[clearing]\nmode = \"off\"\n{auth}{storage}\
             [proxy.upstreams]\nanthropic = \"{up}\"\nopenai = \"{up}\"\ngemini = \"{up}\"\n",
            auth = auth_toml(),
            up = fake.url(),
        ),
    )
    .unwrap();
    let (child, url, mut lines) = proxy_process::start(
        ws.path(),
        &["--listen", "127.0.0.1:0"],
        "toolwire=trace",
        "proxy",
    )
    .await;
    let log = Arc::new(Mutex::new(String::new()));
    let sink = log.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let mut log = sink.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    Proxy {
        _child: child,
        url,
        ws,
        log,
    }
}

/// Every preview's saved-output path in a request body the provider got.
fn previews(body: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(body);
    text.match_indices("sessions/")
        .map(|(at, _)| {
            text[at..]
                .split(['\\', '"', ' ', '\n'])
                .next()
                .unwrap_or("")
                .to_owned()
        })
        .collect()
}

/// One Anthropic request with a large tool result, as `token` (in the
/// header) in session `session`; returns the status, the session header
/// and the preview path the provider received.
async fn one_turn(url: &str, token: &str, session: &str, output: &str) -> (u16, Option<String>) {
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/messages"))
        .header("x-toolwire-token", token)
        .header("x-toolwire-session", session)
        .header("x-api-key", "k")
        .header("anthropic-version", "2023-06-01")
        .json(&json!({"model": "m", "max_tokens": 8, "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": output}]},
        ]}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let header = r
        .headers()
        .get("x-toolwire-session")
        .map(|v| v.to_str().unwrap().to_owned());
    let _ = r.bytes().await;
    (status, header)
}

async fn two_tenants_keep_to_their_own(db: Option<&str>) {
    let fake = FakeProvider::start().await;
    let proxy = start(&fake, db).await;
    let url = &proxy.url;

    // The same agent, the same conversation, two tenants: the session the
    // proxy derives from the conversation is the same id for both, and
    // must be two sessions.
    agent_py::run(&[
        "anthropic",
        &format!("{url}/t/{ALICE}"),
        "loop",
        "--turns",
        "3",
    ])
    .await;
    let alice_requests = fake.received();
    agent_py::run(&[
        "anthropic",
        &format!("{url}/t/{BOB}"),
        "loop",
        "--turns",
        "3",
    ])
    .await;
    let all = fake.received();
    let bob_requests = &all[alice_requests.len()..];
    for (who, requests) in [("alice", &alice_requests[..]), ("bob", bob_requests)] {
        assert_eq!(requests.len(), 3, "{who}");
        let last = requests.last().unwrap();
        assert_eq!(last.path, "/v1/messages", "the token left the path");
        assert!(
            last.header("x-toolwire-token").is_none(),
            "{who}: token forwarded"
        );
        let paths = previews(&last.body);
        assert!(!paths.is_empty(), "{who}: no previews");
        assert!(
            paths
                .iter()
                .all(|p| p.starts_with(&format!("sessions/{who}.px-"))),
            "{who}: {paths:?}"
        );
    }

    // Session ids chosen to collide, and one spelled as the other's.
    let (status, header) = one_turn(url, ALICE, "shared", &"a".repeat(60_000)).await;
    assert_eq!((status, header.as_deref()), (200, Some("shared")));
    let alice_shared = previews(&fake.received().last().unwrap().body);
    let (status, _) = one_turn(url, BOB, "shared", &"b".repeat(60_000)).await;
    assert_eq!(status, 200);
    let bob_shared = previews(&fake.received().last().unwrap().body);
    let (status, _) = one_turn(url, BOB, "alice.shared", &"a".repeat(60_000)).await;
    assert_eq!(status, 200);
    let bob_spelled = previews(&fake.received().last().unwrap().body);
    assert!(
        alice_shared[0].starts_with("sessions/alice.shared/"),
        "{alice_shared:?}"
    );
    assert!(
        bob_shared[0].starts_with("sessions/bob.shared/"),
        "{bob_shared:?}"
    );
    assert!(
        bob_spelled[0].starts_with("sessions/bob.alice.shared/"),
        "{bob_spelled:?}"
    );

    // On the local store the usage records are the tenants' own too.
    if db.is_none() {
        let stats = proxy_process::stats(proxy.ws.path());
        let ids: Vec<&str> = stats
            .iter()
            .map(|s| s["sessionId"].as_str().unwrap())
            .collect();
        assert!(
            ids.iter()
                .all(|id| id.starts_with("alice.") || id.starts_with("bob.")),
            "{ids:?}"
        );
        assert_eq!(ids.len(), 5, "{ids:?}");
    }

    // Neither token ever reached the log.
    let log = proxy.log.lock().unwrap().clone();
    assert!(log.contains("request"), "the proxy logged at trace level");
    for token in [ALICE, BOB] {
        assert!(!log.contains(token), "{token} in the log");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_keep_to_their_own_on_the_local_store() {
    two_tenants_keep_to_their_own(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_keep_to_their_own_on_postgres() {
    let (db, _store) = common::pg::migrated_database();
    two_tenants_keep_to_their_own(Some(&db)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_are_401_in_the_providers_shape_and_reach_no_upstream() {
    let fake = FakeProvider::start().await;
    let proxy = start(&fake, None).await;
    let url = &proxy.url;
    let http = reqwest::Client::new();
    let body =
        json!({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
    let long = "a".repeat(300);
    let bad_headers: Vec<Option<&[u8]>> = vec![
        None,
        Some(b"tok-nobody"),
        Some(b"tok-alice-0c1d2e\xff"),
        Some(long.as_bytes()),
        Some(b"tok-alice-0c1d2"),
    ];
    for header in bad_headers {
        let mut request = http
            .post(format!("{url}/v1/messages"))
            .header("x-api-key", "k")
            .header("anthropic-version", "2023-06-01")
            .json(&body);
        if let Some(value) = header {
            request = request.header(
                "x-toolwire-token",
                reqwest::header::HeaderValue::from_bytes(value).unwrap(),
            );
        }
        let r = request.send().await.unwrap();
        assert_eq!(r.status(), 401, "{header:?}");
        let error: Value = r.json().await.unwrap();
        assert_eq!(error["type"], "error", "Anthropic's shape: {error}");
        assert_eq!(error["error"]["type"], "authentication_error", "{error}");
    }
    let alice_encoded = ALICE.replace('-', "%2D");
    for path in [
        format!("/t/{alice_encoded}/v1/messages"),
        format!("/t/{long}/v1/messages"),
        "/t//v1/messages".to_owned(),
        "/t/%FF%FE/v1/messages".to_owned(),
        format!("/t/{ALICE}x/v1/messages"),
        format!("/x/t/{ALICE}/v1/messages"),
    ] {
        let r = http
            .post(format!("{url}{path}"))
            .header("x-api-key", "k")
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{path}");
    }
    // The OpenAI and Gemini shapes, for their routes.
    let r = http
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth("sk")
        .json(&json!({"model": "m", "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let error: Value = r.json().await.unwrap();
    assert!(error["error"]["message"].is_string(), "{error}");
    let r = http
        .post(format!("{url}/v1beta/models/g:generateContent"))
        .json(&json!({"contents": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let error: Value = r.json().await.unwrap();
    assert_eq!(error["error"]["status"], "UNAUTHENTICATED", "{error}");
    assert!(
        fake.received().is_empty(),
        "a refused request reached the provider"
    );

    // Probes need no token; metrics do.
    assert_eq!(
        http.get(format!("{url}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        http.get(format!("{url}/metrics"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    let r = http
        .get(format!("{url}/t/{ALICE}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("kind=\"unauthorized\""));

    let log = proxy.log.lock().unwrap().clone();
    let leaks: Vec<&str> = log.lines().filter(|l| l.contains(ALICE)).collect();
    assert!(leaks.is_empty(), "a token in the log: {leaks:?}");
}

#[test]
fn beyond_loopback_it_needs_tenants() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["proxy", "--listen", "0.0.0.0:0", "--allow-remote"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("[proxy.auth] tokens"), "{err}");

    std::fs::write(
        dir.path().join("toolwire.toml"),
        "[proxy.auth]\ntokens = [{ name = \"a.b\", sha256 = \"00\" }]\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["proxy", "--listen", "127.0.0.1:0"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("proxy.auth.tokens[0].name"), "{err}");
}
