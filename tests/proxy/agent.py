"""An agent loop driven through the official provider SDKs, for tests/proxy.rs.

    agent.py PROVIDER BASE_URL MODE [--turns N] [--stream]

PROVIDER: anthropic | openai-chat | openai-responses | gemini.
MODE:
  loop    N turns: each answer's tool call gets a large tool result
          (sizes cycle through SIZES), appended as the provider's docs show.
  orphan  one request whose history holds a tool call with no result,
          followed by a user message; prints the outcome instead of failing.
  markers (anthropic) the loop as Claude Code sends it: results as text
          blocks, the cache breakpoint moved to the last block every turn.
  resend  one request with the conversation in --messages (anthropic).
Prints one JSON object on stdout.
"""

import argparse
import json
import sys

SIZES = [120_000, 4_000, 60_000, 30_000, 45_000, 2_000]
TOOLS_ANTHROPIC = [{"name": "bash", "description": "Run a command",
                    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]
TOOLS_OPENAI_CHAT = [{"type": "function", "function": {"name": "bash", "description": "Run a command",
                      "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]
TOOLS_OPENAI_RESPONSES = [{"type": "function", "name": "bash", "description": "Run a command",
                           "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}]
PROMPT = "The build fails; find out why."


def result_text(turn):
    size = SIZES[turn % len(SIZES)]
    line = f"turn {turn}: compiling crate {turn} ... warning: unused variable `x` in module m{turn}\n"
    return (line * (size // len(line) + 1))[:size]


def anthropic_loop(base, turns, stream):
    import anthropic
    client = anthropic.Anthropic(api_key="sk-ant-test", base_url=base, max_retries=0)
    messages = [{"role": "user", "content": PROMPT}]
    for turn in range(turns):
        args = dict(model="claude-sonnet-4-5", max_tokens=1024, system="You are a coding agent.",
                    tools=TOOLS_ANTHROPIC, messages=messages)
        if stream:
            with client.messages.stream(**args) as s:
                reply = s.get_final_message()
        else:
            reply = client.messages.create(**args)
        content = [b.to_dict() for b in reply.content]
        messages.append({"role": "assistant", "content": content})
        results = [{"type": "tool_result", "tool_use_id": b["id"], "content": result_text(turn)}
                   for b in content if b["type"] == "tool_use"]
        assert results, "the fake provider always answers with a tool call"
        messages.append({"role": "user", "content": results})
    return {"turns": turns, "messages": messages}


def anthropic_resend(base, messages):
    """One more request with a conversation as it stands (read from a file
    an earlier loop dumped), as an agent resuming it would send."""
    import anthropic
    client = anthropic.Anthropic(api_key="sk-ant-test", base_url=base, max_retries=0)
    client.messages.create(model="claude-sonnet-4-5", max_tokens=1024, system="You are a coding agent.",
                           tools=TOOLS_ANTHROPIC, messages=messages)
    return {"turns": 1}


def anthropic_markers(base, turns, stream):
    """As Claude Code sends its conversation: tool results as text blocks,
    and one cache breakpoint on the last block of the last user message,
    moved there on every turn (taken off the block that had it before)."""
    import anthropic
    client = anthropic.Anthropic(api_key="sk-ant-test", base_url=base, max_retries=0)
    marker = {"type": "ephemeral"}
    messages = [{"role": "user", "content": [{"type": "text", "text": PROMPT}]}]
    for turn in range(turns):
        for m in messages:
            if isinstance(m["content"], list):
                for b in m["content"]:
                    b.pop("cache_control", None)
                    for inner in b.get("content", []) if isinstance(b.get("content"), list) else []:
                        inner.pop("cache_control", None)
        last = messages[-1]["content"][-1]
        target = last["content"][-1] if last.get("type") == "tool_result" else last
        target["cache_control"] = dict(marker)
        args = dict(model="claude-sonnet-4-5", max_tokens=1024, system="You are a coding agent.",
                    tools=TOOLS_ANTHROPIC, messages=messages)
        if stream:
            with client.messages.stream(**args) as s:
                reply = s.get_final_message()
        else:
            reply = client.messages.create(**args)
        content = [b.to_dict() for b in reply.content]
        messages.append({"role": "assistant", "content": content})
        results = [{"type": "tool_result", "tool_use_id": b["id"],
                    "content": [{"type": "text", "text": result_text(turn)}]}
                   for b in content if b["type"] == "tool_use"]
        assert results, "the fake provider always answers with a tool call"
        messages.append({"role": "user", "content": results})
    return {"turns": turns}


def chat_loop(base, turns, stream):
    import openai
    client = openai.OpenAI(api_key="sk-test", base_url=base + "/v1", max_retries=0)
    messages = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": PROMPT}]
    for turn in range(turns):
        args = dict(model="gpt-5", tools=TOOLS_OPENAI_CHAT, messages=messages)
        if stream:
            text, calls = "", {}
            for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **args):
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    for c in choice.delta.tool_calls or []:
                        call = calls.setdefault(c.index, {"id": c.id, "type": "function",
                                                          "function": {"name": c.function.name, "arguments": ""}})
                        call["function"]["arguments"] += c.function.arguments or ""
            message = {"role": "assistant", "content": text, "tool_calls": list(calls.values())}
        else:
            reply = client.chat.completions.create(**args)
            message = reply.choices[0].message.to_dict()
        messages.append(message)
        for call in message["tool_calls"]:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result_text(turn)})
    return {"turns": turns}


def responses_loop(base, turns, stream):
    import openai
    client = openai.OpenAI(api_key="sk-test", base_url=base + "/v1", max_retries=0)
    items = [{"role": "user", "content": PROMPT}]
    for turn in range(turns):
        args = dict(model="gpt-5", instructions="You are a coding agent.", tools=TOOLS_OPENAI_RESPONSES, input=items)
        if stream:
            reply = None
            for event in client.responses.create(stream=True, **args):
                if event.type == "response.completed":
                    reply = event.response
        else:
            reply = client.responses.create(**args)
        output = [o.to_dict() for o in reply.output]
        items.extend(output)
        for o in output:
            if o["type"] == "function_call":
                items.append({"type": "function_call_output", "call_id": o["call_id"], "output": result_text(turn)})
    return {"turns": turns}


def gemini_loop(base, turns, stream):
    from google import genai
    from google.genai import types
    client = genai.Client(api_key="AIza-test", http_options=types.HttpOptions(base_url=base))
    tools = [types.Tool(function_declarations=[types.FunctionDeclaration(
        name="bash", description="Run a command",
        parameters=types.Schema(type="OBJECT", properties={"command": types.Schema(type="STRING")}))])]
    config = types.GenerateContentConfig(tools=tools, system_instruction="You are a coding agent.",
                                         automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    contents = [types.Content(role="user", parts=[types.Part(text=PROMPT)])]
    for turn in range(turns):
        if stream:
            parts = []
            for chunk in client.models.generate_content_stream(model="gemini-2.5-flash", contents=contents, config=config):
                parts.extend(chunk.candidates[0].content.parts)
        else:
            reply = client.models.generate_content(model="gemini-2.5-flash", contents=contents, config=config)
            parts = reply.candidates[0].content.parts
        contents.append(types.Content(role="model", parts=parts))
        responses = [types.Part(function_response=types.FunctionResponse(name=p.function_call.name,
                                                                          response={"output": result_text(turn)}))
                     for p in parts if p.function_call]
        contents.append(types.Content(role="user", parts=responses))
    return {"turns": turns}


def orphan(provider, base):
    """A history whose tool call never got its result (the agent was
    interrupted), then the user goes on."""
    try:
        if provider == "anthropic":
            import anthropic
            client = anthropic.Anthropic(api_key="sk-ant-test", base_url=base, max_retries=0)
            reply = client.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=[
                {"role": "user", "content": PROMPT},
                {"role": "assistant", "content": [{"type": "text", "text": "Running it."},
                                                  {"type": "tool_use", "id": "toolu_lost", "name": "bash", "input": {"command": "make"}}]},
                {"role": "user", "content": "Never mind, just explain the error."},
            ])
            return {"ok": True, "stop_reason": reply.stop_reason}
        if provider == "openai-chat":
            import openai
            client = openai.OpenAI(api_key="sk-test", base_url=base + "/v1", max_retries=0)
            client.chat.completions.create(model="gpt-5", messages=[
                {"role": "user", "content": PROMPT},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "call_lost", "type": "function",
                                                                       "function": {"name": "bash", "arguments": "{}"}}]},
                {"role": "user", "content": "Never mind."},
            ])
            return {"ok": True}
    except Exception as err:  # the SDK's own error type carries the status
        return {"ok": False, "status": getattr(err, "status_code", None),
                "body": getattr(err, "body", None), "error": str(err)}
    raise SystemExit(f"orphan: unsupported provider {provider}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("provider")
    p.add_argument("base")
    p.add_argument("mode")
    p.add_argument("--turns", type=int, default=30)
    p.add_argument("--stream", action="store_true")
    p.add_argument("--dump", help="loop: write the final conversation there (anthropic)")
    p.add_argument("--messages", help="resend: the conversation to send (anthropic)")
    a = p.parse_args()
    if a.mode == "orphan":
        out = orphan(a.provider, a.base)
    elif a.mode == "markers":
        out = anthropic_markers(a.base, a.turns, a.stream)
    elif a.mode == "resend":
        with open(a.messages) as f:
            out = anthropic_resend(a.base, json.load(f))
    else:
        loop = {"anthropic": anthropic_loop, "openai-chat": chat_loop,
                "openai-responses": responses_loop, "gemini": gemini_loop}[a.provider]
        out = loop(a.base, a.turns, a.stream)
        messages = out.pop("messages", None)
        if a.dump:
            with open(a.dump, "w") as f:
                json.dump(messages, f)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
