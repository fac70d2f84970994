"""Drives `toolwire mcp` with the official Python MCP SDK's stdio client
and checks what a client sees. Run by tests/mcp.rs:

    client_checks.py sized TOOLWIRE DATA_DIR      the test server (sized_server.py)
    client_checks.py everything TOOLWIRE DATA_DIR the reference "everything" server
    client_checks.py everything-modern TOOLWIRE DATA_DIR
        a 2026-07-28 client through the front to the reference server, which
        speaks 2025-11-25 only
    client_checks.py pairing TOOLWIRE DATA_DIR CLIENT_ERA SERVER_ERA
        the official client of one era (legacy: 2025-11-25 `initialize`;
        modern: 2026-07-28 `server/discover` and per-request `_meta`) through
        the front to sized_server.py serving one era

Exits non-zero with the failed check on stderr; prints a JSON summary of
what it saw on success (the Rust test checks the files on disk against it).
"""

import hashlib
import json
import os
import sys

import anyio
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client, types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sized_server import make_text  # noqa: E402

# Generous: a hang is a failure, never a slow pass.
STEP = 60

BIG = 120_000


def front(toolwire, data_dir, server, session="checks"):
    return StdioServerParameters(
        command=toolwire,
        args=["mcp", "--session", session, "--", *server],
        cwd=data_dir,
    )


def text_of(result):
    return [c.text for c in result.content if c.type == "text"]


def check(cond, what):
    if not cond:
        raise AssertionError(what)


async def small_whole_large_linked(session, name):
    """A small `text` result comes whole; a large one as preview + link."""
    small = await session.call_tool("text", {"size": 300})
    check(text_of(small) == [make_text(300)], "a small result comes through whole")
    big = await session.call_tool("text", {"size": BIG})
    check(len(big.content) == 2, f"preview + link, got {big.content}")
    preview, link = big.content
    check(preview.type == "text" and preview.text.startswith("<persisted-output>"), "preview text")
    check(link.type == "resource_link" and link.uri.startswith(f"toolwire://saved-output/{name}/"), f"link: {link}")
    return big, preview, link


async def read_all_pages(session, uri, limit):
    """read_saved_output page after page; the texts joined."""
    out, offset, pages = [], 0, 0
    while True:
        r = await session.call_tool("read_saved_output", {"uri": uri, "offset": offset, "limit": limit})
        check(not r.is_error, f"read_saved_output failed: {text_of(r)}")
        page = r.structured_content
        check(page["startLine"] == offset, f"page starts at {page['startLine']}, asked {offset}")
        check(r.content[0].text == page["text"], "content text is the page text")
        out.append(page["text"])
        pages += 1
        if not page["truncated"]:
            return "".join(out), pages, page["totalLines"]
        offset = page["endLine"]


async def resource_pages(session, uri, limit):
    out, offset = [], 0
    while True:
        r = await session.read_resource(f"{uri}?offset={offset}&limit={limit}")
        text = r.contents[0].text
        if text == "":
            return "".join(out)
        out.append(text)
        offset += limit


async def sized(toolwire, data_dir):
    python = sys.executable
    server = [python, os.path.join(HERE, "sized_server.py")]
    summary = {}
    async with stdio_client(front(toolwire, data_dir, server)) as (r, w):
        async with ClientSession(r, w) as s:
            with anyio.fail_after(STEP):
                await s.initialize()
            tools = {t.name: t for t in (await s.list_tools()).tools}
            check({"text", "text_and_image", "report", "crash", "read_saved_output"} <= set(tools), f"tools: {sorted(tools)}")

            big, preview, link = await small_whole_large_linked(s, "checks")
            check(preview.text.startswith("<persisted-output>\nOutput too large ("), "preview text")
            check(make_text(BIG)[:1000] in preview.text, "the preview shows the start of the output")
            check(link.mime_type == "text/plain" and link.size == len(make_text(BIG).encode()), "link type and size")
            summary["uri"] = link.uri
            summary["sha256"] = hashlib.sha256(make_text(BIG).encode()).hexdigest()
            summary["preview"] = preview.text

            again = await s.call_tool("text", {"size": BIG})
            check([c.model_dump() for c in again.content] == [c.model_dump() for c in big.content], "the same output yields the same preview and link")

            whole = await s.read_resource(link.uri)
            check(whole.contents[0].text == make_text(BIG), "resources/read returns the exact original")
            check(await resource_pages(s, link.uri, 700) == make_text(BIG), "resources/read pages join to the exact original")
            paged, pages, total_lines = await read_all_pages(s, link.uri, 500)
            check(paged == make_text(BIG), "read_saved_output pages join to the exact original")
            check(pages > 2, f"{pages} pages")
            summary["pages"] = pages
            summary["totalLines"] = total_lines

            grep = await s.call_tool("read_saved_output", {"uri": link.uri, "grep": "^000123 "})
            check(grep.structured_content["text"].startswith("124:000123 résumé ✓"), f"grep: {grep.structured_content['text'][:80]}")

            missing = await s.call_tool("read_saved_output", {"uri": "toolwire://saved-output/checks/mcp-nothing"})
            check(missing.is_error, "reading a link with nothing behind it is a tool error")
            try:
                await s.read_resource("toolwire://saved-output/checks/mcp-nothing")
                check(False, "resources/read of a missing link must fail")
            except MCPError as e:
                check(e.error.code == -32002, f"resource not found code, got {e.error.code}")

            mixed = await s.call_tool("text_and_image", {"size": BIG})
            check([c.type for c in mixed.content] == ["text", "image"], "a result with an image is left whole")
            check(mixed.content[0].text == make_text(BIG), "its text too")

            rep = await s.call_tool("report", {"size": BIG})
            check(rep.content[0].text.startswith("<persisted-output>"), "structured result's text is budgeted")
            check(rep.content[1].type == "resource_link", "with a link")
            lines = make_text(BIG).split("\n")
            check(rep.structured_content == {"lines": lines, "count": len(lines)}, "structuredContent passes unchanged")
            small_rep = await s.call_tool("report", {"size": 100})
            check(small_rep.structured_content["count"] == len(make_text(100).split("\n")), "small structured result")

            note = await s.read_resource("sized://notes/a")
            check(note.contents[0].text == f"note a: {make_text(50)}", "the server's own resources still work")
            templates = await s.list_resource_templates()
            check([t.uri_template for t in templates.resource_templates] == ["sized://notes/{name}"], "resource templates")
            prompts = await s.list_prompts()
            check([p.name for p in prompts.prompts] == ["review"], "prompts")
            prompt = await s.get_prompt("review", {"code": "x = 1"})
            check(prompt.messages[0].content.text == "Please review this code:\nx = 1", "prompts/get")

            try:
                with anyio.fail_after(STEP):
                    await s.call_tool("crash", {})
                check(False, "a call whose server crashed must fail")
            except MCPError as e:
                summary["crashError"] = {"code": e.error.code, "message": e.error.message}
    print(json.dumps(summary))


async def sample(context, params):
    """The client side of `sampling/createMessage`, a request from the server."""
    asked = params.messages[0].content.text
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=f"sampled: {asked}"),
        model="test-model",
        stop_reason="endTurn",
    )


async def elicit(context, params):
    """The client side of `elicitation/create`: the user declines."""
    return types.ElicitResult(action="decline")


async def everything(toolwire, data_dir):
    server = ["node", os.path.join(HERE, "node_modules/@modelcontextprotocol/server-everything/dist/index.js"), "stdio"]
    summary = {}
    async with stdio_client(front(toolwire, data_dir, server)) as (r, w):
        async with ClientSession(r, w, sampling_callback=sample, elicitation_callback=elicit) as s:
            with anyio.fail_after(STEP):
                init = await s.initialize()
            check(init.capabilities.resources.subscribe is True, "the server's own capabilities pass unchanged")
            summary["protocolVersion"] = init.protocol_version
            names = [t.name for t in (await s.list_tools()).tools]
            check("echo" in names and names[-1] == "read_saved_output", f"tools: {names}")
            echo = await s.call_tool("echo", {"message": "hello"})
            check(text_of(echo) == ["Echo: hello"], "small echo")
            message = make_text(BIG)
            big = await s.call_tool("echo", {"message": message})
            check(big.content[0].text.startswith("<persisted-output>") and big.content[1].type == "resource_link", "large echo replaced")
            whole = await s.read_resource(big.content[1].uri)
            check(whole.contents[0].text == "Echo: " + message, "the exact original")
            image = await s.call_tool("get-tiny-image", {})
            check("image" in [c.type for c in image.content], "image result passes")
            structured = await s.call_tool("get-structured-content", {"location": "New York"})
            check(structured.structured_content is not None, "structured content passes")
            resources = await s.list_resources()
            check(len(resources.resources) > 0, "the server's resources are listed")
            first = resources.resources[0]
            read = await s.read_resource(first.uri)
            check(len(read.contents) == 1, "the server's resource reads")
            prompts = await s.list_prompts()
            check(len(prompts.prompts) > 0, "the server's prompts are listed")
            simple = [p for p in prompts.prompts if not p.arguments]
            if simple:
                got = await s.get_prompt(simple[0].name)
                check(len(got.messages) > 0, "a prompt of the server's own")

            # Requests from the server to the client, and their answers.
            names = [t.name for t in (await s.list_tools()).tools]
            check("trigger-sampling-request" in names, f"sampling tool registered: {names}")
            with anyio.fail_after(STEP):
                sampled = await s.call_tool("trigger-sampling-request", {"prompt": "hi", "maxTokens": 10})
            check("sampled: " in text_of(sampled)[0], f"sampling round trip: {text_of(sampled)}")
            if "trigger-elicitation-request" in names:
                with anyio.fail_after(STEP):
                    elicited = await s.call_tool("trigger-elicitation-request", {})
                check(any("decline" in t for t in text_of(elicited)), f"elicitation round trip: {text_of(elicited)}")
                summary["elicitation"] = True
            # Progress notifications for a call in flight.
            steps = []

            async def on_progress(progress, total, message):
                steps.append(progress)

            with anyio.fail_after(STEP):
                await s.call_tool("trigger-long-running-operation", {"duration": 0.3, "steps": 3}, progress_callback=on_progress)
            check(len(steps) == 3, f"progress notifications: {steps}")

            summary["resources"] = len(resources.resources)
            summary["prompts"] = len(prompts.prompts)
    print(json.dumps(summary))


async def everything_modern(toolwire, data_dir):
    server = ["node", os.path.join(HERE, "node_modules/@modelcontextprotocol/server-everything/dist/index.js"), "stdio"]
    summary = {}
    async with stdio_client(front(toolwire, data_dir, server, "everything-modern")) as (r, w):
        async with ClientSession(r, w) as s:
            with anyio.fail_after(STEP):
                found = await s.discover()
            check(found.supported_versions == ["2026-07-28"], f"supported: {found.supported_versions}")
            check(found.capabilities.resources is not None and found.capabilities.tools is not None, f"capabilities: {found.capabilities}")
            summary["server"] = s.server_info.name if s.server_info else None
            listed = await s.list_tools()
            names = [t.name for t in listed.tools]
            check("echo" in names and names[-1] == "read_saved_output", f"tools: {names}")
            echo = await s.call_tool("echo", {"message": "hello"})
            check(text_of(echo) == ["Echo: hello"], "small echo")
            message = make_text(BIG)
            big = await s.call_tool("echo", {"message": message})
            check(big.content[0].text.startswith("<persisted-output>") and big.content[1].type == "resource_link", "large echo replaced")
            whole = await s.read_resource(big.content[1].uri)
            check(whole.contents[0].text == "Echo: " + message, "the exact original")
            paged, _, _ = await read_all_pages(s, big.content[1].uri, 900)
            check(paged == "Echo: " + message, "read_saved_output pages join to the exact original")
            structured = await s.call_tool("get-structured-content", {"location": "New York"})
            check(structured.structured_content is not None, "structured content passes")
            resources = await s.list_resources()
            check(len(resources.resources) > 0, "the server's resources are listed")
            read = await s.read_resource(resources.resources[0].uri)
            check(len(read.contents) == 1, "the server's resource reads")
            prompts = await s.list_prompts()
            check(len(prompts.prompts) > 0, "the server's prompts are listed")
            summary["tools"] = len(names)
            summary["resources"] = len(resources.resources)
    print(json.dumps(summary))


async def pairing(toolwire, data_dir, client_era, server_era):
    from sized_server import CACHE_HINTS, ROOMY_MAX

    modern_client = client_era == "modern"
    server = [sys.executable, os.path.join(HERE, "sized_server.py"), "--era", server_era]
    session = f"pair-{client_era}-{server_era}"
    summary = {}
    async def named(context, params):
        """The client side of `elicitation/create`: the user says who they are."""
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async with stdio_client(front(toolwire, data_dir, server, session)) as (r, w):
        async with ClientSession(r, w, elicitation_callback=named) as s:
            with anyio.fail_after(STEP):
                if modern_client:
                    found = await s.discover()
                    check(found.supported_versions == ["2026-07-28"], f"supported: {found.supported_versions}")
                    caps = found.capabilities
                else:
                    init = await s.initialize()
                    check(init.protocol_version == "2025-11-25", f"version: {init.protocol_version}")
                    check(init.server_info.name == "sized", f"server info: {init.server_info}")
                    caps = init.capabilities
            summary["protocolVersion"] = s.protocol_version
            check(caps.tools is not None and caps.resources is not None, f"capabilities: {caps}")

            listed = await s.list_tools()
            names = [t.name for t in listed.tools]
            check(names == ["text", "text_and_image", "report", "crash", "noise", "roomy", "numbers", "greet", "read_saved_output"],
                  f"tools in the server's order, ours last: {names}")
            roomy = next(t for t in listed.tools if t.name == "roomy")
            check((roomy.meta or {}).get("anthropic/maxResultSizeChars") == ROOMY_MAX, f"roomy's _meta: {roomy.meta}")
            if modern_client and server_era == "modern":
                hint = CACHE_HINTS["tools/list"]
                check((listed.ttl_ms, listed.cache_scope) == (hint.ttl_ms, hint.scope), f"tools/list hints: {listed.ttl_ms} {listed.cache_scope}")
            summary["toolsTtlMs"] = getattr(listed, "ttl_ms", None)
            summary["toolsCacheScope"] = getattr(listed, "cache_scope", None)

            _, preview, link = await small_whole_large_linked(s, session)
            whole = await s.read_resource(link.uri)
            check(whole.contents[0].text == make_text(BIG), "resources/read returns the exact original")
            if modern_client:
                check((whole.ttl_ms, whole.cache_scope) == (0, "private"), f"saved output hints: {whole.ttl_ms} {whole.cache_scope}")
            paged, pages, _ = await read_all_pages(s, link.uri, 700)
            check(paged == make_text(BIG), "read_saved_output pages join to the exact original")
            summary["pages"] = pages
            summary["uri"] = link.uri
            summary["sha256"] = hashlib.sha256(make_text(BIG).encode()).hexdigest()

            zero = await s.call_tool("read_saved_output", {"uri": link.uri, "limit": 0})
            check(zero.is_error and "limit" in text_of(zero)[0] and "at least 1" in text_of(zero)[0], f"limit 0: {text_of(zero)}")
            summary["limitZero"] = text_of(zero)[0]

            try:
                await s.read_resource(f"toolwire://saved-output/{session}/mcp-nothing")
                check(False, "resources/read of a missing link must fail")
            except MCPError as e:
                summary["notFoundCode"] = e.error.code

            # The server's own declared size: 120,000 characters stay whole.
            roomy_result = await s.call_tool("roomy", {"size": BIG})
            check(text_of(roomy_result) == [make_text(BIG)], "a tool's maxResultSizeChars is honoured")

            rep = await s.call_tool("report", {"size": BIG})
            check(rep.content[0].text.startswith("<persisted-output>") and rep.content[1].type == "resource_link", "structured result budgeted")
            lines = make_text(BIG).split("\n")
            check(rep.structured_content == {"lines": lines, "count": len(lines)}, "structuredContent passes unchanged")
            if modern_client and server_era == "modern":
                nums = await s.call_tool("numbers", {"count": 5})
                check(nums.structured_content == [0, 1, 2, 3, 4], f"structuredContent of any JSON value: {nums.structured_content}")

            if not modern_client:
                # Asked mid-call (2025-11-25 server) or in an input round
                # the front turns into that request (2026-07-28 server).
                with anyio.fail_after(STEP):
                    greeting = await s.call_tool("greet", {})
                check(text_of(greeting) == ["Hello, Ada!"], f"elicitation round trip: {text_of(greeting)}")
                summary["greeting"] = text_of(greeting)[0]

            note = await s.read_resource("sized://notes/a")
            check(note.contents[0].text == f"note a: {make_text(50)}", "the server's own resources")
            if modern_client and server_era == "modern":
                hint = CACHE_HINTS["resources/read"]
                check((note.ttl_ms, note.cache_scope) == (hint.ttl_ms, hint.scope), f"resources/read hints: {note.ttl_ms} {note.cache_scope}")
            prompts = await s.list_prompts()
            check([p.name for p in prompts.prompts] == ["review"], "prompts")
            prompt = await s.get_prompt("review", {"code": "x = 1"})
            check(prompt.messages[0].content.text == "Please review this code:\nx = 1", "prompts/get")
    print(json.dumps(summary))


if __name__ == "__main__":
    scenario, toolwire, data_dir = sys.argv[1:4]
    if scenario == "pairing":
        anyio.run(pairing, toolwire, data_dir, *sys.argv[4:6])
    else:
        scenarios = {"sized": sized, "everything": everything, "everything-modern": everything_modern}
        anyio.run(scenarios[scenario], toolwire, data_dir)
