"""An MCP server, written with the official Python SDK, whose tools return
outputs of chosen sizes: plain text, text with an image, structured content.
The `toolwire mcp` tests run it behind the front and directly.

Everything it returns is a pure function of the arguments, so the same call
made directly and through the front can be compared byte for byte.
"""

import base64
import os
import sys
from typing import TypedDict

from mcp.server import MCPServer
from mcp.server.mcpserver import Image

mcp = MCPServer("sized")

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


@mcp.resource("sized://notes/{name}")
def note(name: str) -> str:
    """A note of the server's own."""
    return f"note {name}: {make_text(50)}"


@mcp.prompt()
def review(code: str) -> str:
    """A prompt of the server's own."""
    return f"Please review this code:\n{code}"


if __name__ == "__main__":
    mcp.run()
