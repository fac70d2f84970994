//! A proxy a team shares (PROTOCOL.md 12.3): tenants by token, through the
//! real binary with the official SDKs (tests/proxy/.venv) and a fake
//! provider, on the local store, on a real PostgreSQL, and on PostgreSQL
//! with saved outputs on an S3-compatible server. Each tenant gets
//! its own sessions and previews, whatever session id it picks; a request
//! without a valid token is answered 401 in the provider's shape and
//! reaches no upstream; tokens never reach a log or the provider.

#[path = "common/agent_py.rs"]
mod agent_py;
mod common;
mod fake_provider;
#[path = "common/proxy_process.rs"]
mod proxy_process;
#[path = "common/s3.rs"]
mod s3;
#[path = "common/tenants.rs"]
mod tenants;

use fake_provider::FakeProvider;
use serde_json::{Value, json};
use tenants::{ALICE, BOB, Store};

/// A proxy with alice and bob as tenants, in front of `fake`, on `store`,
/// logging everything.
async fn start(fake: &FakeProvider, store: Store<'_>) -> tenants::Proxy {
    tenants::start(fake, store, "", "toolwire=trace").await
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

async fn two_tenants_keep_to_their_own(store: Store<'_>) {
    let fake = FakeProvider::start().await;
    let proxy = start(&fake, store).await;
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
    if matches!(store, Store::Local) {
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
    two_tenants_keep_to_their_own(Store::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_keep_to_their_own_on_postgres() {
    let (db, _store) = common::pg::migrated_database();
    two_tenants_keep_to_their_own(Store::Postgres(&db)).await;
}

/// The shared store whole: decisions on PostgreSQL, saved outputs in a
/// bucket, every object under its tenant's sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_keep_to_their_own_on_postgres_and_object_storage() {
    let shared = s3::SharedFixture::start("tenants", "tw", common::pg::migrated_database());
    two_tenants_keep_to_their_own(Store::Shared {
        db: &shared.db,
        objects: &shared.objects,
    })
    .await;
    let keys = shared.s3.keys("tenants", "tw/");
    assert!(!keys.is_empty(), "nothing saved in the bucket");
    assert!(
        keys.iter()
            .all(|k| k.starts_with("tw/sessions/alice.") || k.starts_with("tw/sessions/bob.")),
        "{keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_are_401_in_the_providers_shape_and_reach_no_upstream() {
    let fake = FakeProvider::start().await;
    let proxy = start(&fake, Store::Local).await;
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
