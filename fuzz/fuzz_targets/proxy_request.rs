//! The proxy's request path on any input: the first line is a request
//! path, the rest a request body. Normalising the path never panics, is a
//! fixed point and leaves no dot segment for an upstream to climb with. The
//! body is
//! parsed as the proxy parses it; writing its conversation back unchanged
//! gives the very same bytes, and writing back a changed one (the last
//! element dropped, a result replaced) gives a body whose conversation is
//! exactly the new one and whose other members are untouched. A tenant's
//! token read off the path is one a tenant can have, what is left of the
//! path is a path, and the path as logged shows no token.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use toolwire::proxy::auth::{loggable_path, presented};
use toolwire::proxy::route::normalize_path;
use toolwire::proxy::splice::Body;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (path, body) = text.split_once('\n').unwrap_or((text, ""));
    if let Some(normal) = normalize_path(path) {
        assert!(normal.starts_with('/'), "{path:?} -> {normal:?}");
        assert_eq!(normalize_path(&normal).as_deref(), Some(normal.as_str()));
        for segment in normal.split('/') {
            let plain = segment.to_ascii_lowercase().replace("%2e", ".");
            assert!(plain != "." && plain != "..", "{path:?} -> {normal:?}");
        }
    }
    let p = presented(path, &http::HeaderMap::new());
    if path.starts_with("/t/") {
        assert!(p.path.starts_with('/'), "{path:?} -> {:?}", p.path);
        assert!(
            path.ends_with(&p.path) || p.path == "/",
            "{path:?} -> {:?}",
            p.path
        );
        if let Some(Ok(token)) = &p.token {
            assert!(!token.is_empty() && token.len() <= 256, "{token:?}");
            assert!(
                !loggable_path(path).contains(&format!("/t/{token}")),
                "{path:?}"
            );
        }
    } else {
        assert_eq!(p.token, None);
        assert_eq!(p.path, path);
    }
    for key in ["messages", "input", "contents"] {
        let Ok(parsed) = Body::parse(body, key) else {
            continue;
        };
        let Some(old) = parsed.conversation(key).cloned() else {
            continue;
        };
        assert_eq!(parsed.with_conversation(&old, &old).unwrap(), body);
        let mut changed = old.clone();
        if let Some(first) = changed.first_mut() {
            *first = serde_json::json!({"role": "user", "content": "<persisted-output>"});
        }
        changed.pop();
        let out = parsed
            .with_conversation(&old, &changed)
            .expect("a conversation parsed from the body can be written back");
        let value: Value = toolwire::json::from_slice(out.as_bytes()).expect("still JSON");
        assert_eq!(value[key], Value::Array(changed), "{key}");
        let (mut before, mut after) = (parsed.value.clone(), value);
        before.as_object_mut().map(|o| o.remove(key));
        after.as_object_mut().map(|o| o.remove(key));
        assert_eq!(before, after, "only the conversation changed");
    }
});
