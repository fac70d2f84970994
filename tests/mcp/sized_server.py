"""An MCP server, written with the official Python SDK, whose tools return
outputs of chosen sizes: plain text, text with an image, structured content.
The `toolwire mcp` tests run it behind the front and directly.

Everything it returns is a pure function of the arguments, so the same call
made directly and through the front can be compared byte for byte.

    sized_server.py                 both eras: the client's first request decides
    sized_server.py --era legacy    2025-11-25 only (an `initialize` handshake)
    sized_server.py --era modern    2026-07-28 only (per-request `_meta`)

The one-era servers run the SDK's own serving loop for that era (the ones
its dual-era loop chooses between), so each answers the other era's
opening the way the pinned SDK does.
"""

import base64
import os
import sys
from typing import Annotated, TypedDict

import anyio
import mcp_types as types
from mcp.server import MCPServer
from mcp.server.caching import CacheHint
from mcp.server.mcpserver import Elicit, Image, Resolve
from pydantic import BaseModel

# Caching hints for the 2026-07-28 results that carry them, distinct per
# method so a test can tell they came through unchanged.
CACHE_HINTS = {
    "tools/list": CacheHint(ttl_ms=300_000, scope="public"),
    "prompts/list": CacheHint(ttl_ms=120_000, scope="public"),
    "resources/templates/list": CacheHint(ttl_ms=60_000, scope="public"),
    "resources/read": CacheHint(ttl_ms=30_000, scope="private"),
}

mcp = MCPServer("sized", cache_hints=CACHE_HINTS)

# A 1x1 PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def make_text(size: int) -> str:
    """`size` characters of numbered lines, with non-ASCII characters and a
    CRLF now and then, so that exactness is tested on more than ASCII."""
    parts = []
    total = 0
    i = 0
    while total < size:
        end = "\r\n" if i % 97 == 96 else "\n"
        line = f"{i:06d} résumé ✓ {'x' * (i % 61)}{end}"
        parts.append(line)
        total += len(line)
        i += 1
    return "".join(parts)[:size]


@mcp.tool(structured_output=False)
def text(size: int) -> str:
    """Return `size` characters of text."""
    return make_text(size)


@mcp.tool(structured_output=False)
def text_and_image(size: int) -> list:
    """Return `size` characters of text and a tiny image."""
    return [make_text(size), Image(data=PIXEL, format="png")]


class Report(TypedDict):
    lines: list[str]
    count: int


@mcp.tool()
def report(size: int) -> Report:
    """Return about `size` characters as structured content."""
    lines = make_text(size).split("\n")
    return {"lines": lines, "count": len(lines)}


@mcp.tool(structured_output=False)
def crash() -> str:
    """Exit the server in the middle of the call."""
    os._exit(3)


@mcp.tool(structured_output=False)
def noise() -> str:
    """Write a line that is not JSON to stdout, then answer normally."""
    sys.stdout.write("this line is not JSON\n")
    sys.stdout.flush()
    return "ok"


# The size this server means `roomy`'s results to be shown whole up to.
ROOMY_MAX = 200_000


@mcp.tool(structured_output=False, meta={"anthropic/maxResultSizeChars": ROOMY_MAX})
def roomy(size: int) -> str:
    """Return `size` characters of text; declares results up to ROOMY_MAX whole."""
    return make_text(size)


@mcp.tool()
def numbers(count: int) -> types.CallToolResult:
    """Structured content that is not an object (allowed since 2026-07-28)."""
    values = list(range(count))
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=" ".join(map(str, values)))],
        structured_content=values,
    )


class Name(BaseModel):
    name: str


def ask_name() -> Elicit[Name]:
    return Elicit("What is your name?", Name)


@mcp.tool(structured_output=False)
def greet(who: Annotated[Name, Resolve(ask_name)]) -> str:
    """Greet whoever the client says it is: asked by `elicitation/create`
    mid-call under 2025-11-25, by an input round under 2026-07-28."""
    return f"Hello, {who.name}!"


@mcp.resource("sized://notes/{name}")
def note(name: str) -> str:
    """A note of the server's own."""
    return f"note {name}: {make_text(50)}"


@mcp.prompt()
def review(code: str) -> str:
    """A prompt of the server's own."""
    return f"Please review this code:\n{code}"


async def serve_one_era(era: str) -> None:
    # The pinned SDK's per-era loops (mcp/server/runner.py), which its
    # dual-era `Server.run` dispatches to on the client's first request.
    from mcp.server.runner import _serve_legacy_stream, _serve_modern_stream
    from mcp.server.stdio import stdio_server

    server = mcp._lowlevel_server
    async with stdio_server() as (read, write):
        async with server.lifespan(server) as state:
            try:
                if era == "modern":
                    await _serve_modern_stream(server, read, write, lifespan_state=state, raise_exceptions=False)
                else:
                    await _serve_legacy_stream(
                        server,
                        read,
                        write,
                        lifespan_state=state,
                        session_id=None,
                        init_options=server.create_initialization_options(),
                        raise_exceptions=False,
                    )
            finally:
                await write.aclose()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--era" and sys.argv[2] in ("legacy", "modern"):
        anyio.run(serve_one_era, sys.argv[2])
    else:
        mcp.run()
