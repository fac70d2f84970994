//! Conversations the benchmarks send, shared by the bench targets.

use serde_json::{Value, json};

/// One call and its Anthropic result.
pub fn pair(id: &str, body: &str) -> [Value; 2] {
    [
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "Bash", "input": {"command": "make"}}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": body}]}),
    ]
}

/// One call and its result in `format`.
pub fn pair_in(format: &str, id: &str, body: &str) -> [Value; 2] {
    match format {
        "openai-chat" => [
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "Bash", "arguments": "{\"command\":\"make\"}"}}]}),
            json!({"role": "tool", "tool_call_id": id, "content": body}),
        ],
        "openai-responses" => [
            json!({"type": "function_call", "call_id": id, "name": "Bash", "arguments": "{\"command\":\"make\"}"}),
            json!({"type": "function_call_output", "call_id": id, "output": body}),
        ],
        "gemini" => [
            json!({"role": "model", "parts": [{"functionCall": {"id": id, "name": "Bash", "args": {"command": "make"}}}]}),
            json!({"role": "user", "parts": [{"functionResponse": {"id": id, "name": "Bash", "response": {"output": body}}}]}),
        ],
        _ => pair(id, body),
    }
}
