//! What a run's input costs under a provider's prompt cache, priced from
//! the requests the provider received: each request's prompt is read in
//! the order the cache reads it (tools, then the system prompt, then the
//! conversation, with Anthropic's `cache_control` markers left out, since
//! they say where to cache and are not prompt content); the longest prefix
//! it shares with the request before it in the same conversation is a
//! cache read, the rest is written. Four chars a token. The figure is in
//! tokens at the input price; only ratios between runs are compared.

use serde_json::Value;

use super::{Api, Seen};
use crate::fake_provider::{cache_prompt, common_prefix};

/// Prices relative to the input price.
#[derive(Debug, Clone, Copy)]
pub struct Prices {
    pub name: &'static str,
    pub read: f64,
    pub write: f64,
}

/// Anthropic: a cache read 0.1×, a cache write (5-minute) 1.25×.
pub const ANTHROPIC: Prices = Prices {
    name: "anthropic",
    read: 0.1,
    write: 1.25,
};
/// OpenAI: cached input at 0.1× (the GPT-5 family), no write premium.
pub const OPENAI: Prices = Prices {
    name: "openai",
    read: 0.1,
    write: 1.0,
};
/// Gemini: implicit caching at 0.25× (2.5 models), no write premium.
pub const GEMINI: Prices = Prices {
    name: "gemini",
    read: 0.25,
    write: 1.0,
};
pub const ALL: [Prices; 3] = [ANTHROPIC, OPENAI, GEMINI];

/// The prompt of a request as the cache reads it: tools, system prompt,
/// conversation.
pub fn prompt(api: Api, body: &Value) -> Vec<u8> {
    let members = match api {
        Api::Anthropic => ["tools", "system", "messages"],
        Api::Responses => ["tools", "instructions", "input"],
        Api::Gemini => ["tools", "systemInstruction", "contents"],
    };
    cache_prompt(body, members)
}

/// The priced input of prompts sent in order, one conversation.
pub fn price_prompts(prompts: &[Vec<u8>], prices: Prices) -> f64 {
    let mut total = 0.0;
    let mut previous: &[u8] = &[];
    for p in prompts {
        let read = common_prefix(previous, p);
        let written = p.len() - read;
        total += (read as f64 * prices.read + written as f64 * prices.write) / 4.0;
        previous = p;
    }
    total
}

/// The priced input of a run: every answered model request, each
/// conversation (see [`Seen::conversation`]) priced on its own.
pub fn price_run(seen: &[Seen], prices: Prices) -> f64 {
    let mut conversations: Vec<(String, Vec<Vec<u8>>)> = Vec::new();
    for s in seen
        .iter()
        .filter(|s| s.api.is_some() && !s.held && s.status == 200)
    {
        let key = s.conversation();
        match conversations.iter_mut().find(|(k, _)| *k == key) {
            Some((_, prompts)) => prompts.push(s.prompt()),
            None => conversations.push((key, vec![s.prompt()])),
        }
    }
    conversations
        .iter()
        .map(|(_, prompts)| price_prompts(prompts, prices))
        .sum()
}

#[test]
fn pricing_reads_the_shared_prefix_and_writes_the_rest() {
    // 40 chars written, then 40 read + 40 written, then a prompt that
    // breaks at char 20: 20 read, 60 written.
    let a = vec![b'a'; 40];
    let mut b = a.clone();
    b.extend(vec![b'b'; 40]);
    let mut c = vec![b'a'; 20];
    c.extend(vec![b'c'; 60]);
    let prompts = [a, b, c];
    let anthropic = price_prompts(&prompts, ANTHROPIC);
    let expect = (40.0 * 1.25 + 40.0 * 0.1 + 40.0 * 1.25 + 20.0 * 0.1 + 60.0 * 1.25) / 4.0;
    assert!((anthropic - expect).abs() < 1e-9, "{anthropic} != {expect}");
    let gemini = price_prompts(&prompts, GEMINI);
    let expect = (40.0 + 40.0 * 0.25 + 40.0 + 20.0 * 0.25 + 60.0) / 4.0;
    assert!((gemini - expect).abs() < 1e-9, "{gemini} != {expect}");
}

#[test]
fn the_prompt_is_tools_system_messages_without_cache_markers() {
    let body = serde_json::json!({
        "model": "m", "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
        "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "Bash"}]
    });
    let p = String::from_utf8(prompt(Api::Anthropic, &body)).unwrap();
    assert_eq!(
        p,
        r#"[[{"name":"Bash"}],[{"type":"text","text":"s"}],[{"role":"user","content":[{"type":"text","text":"hi"}]}]]"#
    );
}
