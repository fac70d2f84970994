#!/usr/bin/env python3
"""Generate the Python sources that mirror toolwire's published schemas:

    toolwire_client/models.py     pydantic models, from schema/toolwire.schema.json
    toolwire_client/_methods.py   the method table, from schema/openrpc.json

    .venv/bin/python generate.py           # rewrite both
    .venv/bin/python generate.py --check   # exit 1 when either is stale

Both schemas are generated from the Rust types by `toolwire schema --out
schema`; editors/regenerate.sh runs everything in order.
"""
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMA = HERE.parent.parent / "schema" / "toolwire.schema.json"
OUT = HERE / "toolwire_client" / "models.py"
RPC = HERE.parent.parent / "schema" / "openrpc.json"
METHODS = HERE / "toolwire_client" / "_methods.py"
NOTE = "Do not edit: run editors/regenerate.sh."


def generate(target: Path) -> None:
    subprocess.run(
        [
            str(Path(sys.executable).with_name("datamodel-codegen")),
            "--input", str(SCHEMA),
            "--input-file-type", "jsonschema",
            "--output", str(target),
            "--output-model-type", "pydantic_v2.BaseModel",
            "--target-python-version", "3.11",
            "--disable-timestamp",
            "--use-schema-description",
            "--use-field-description",
            "--use-standard-collections",
            "--use-union-operator",
            "--snake-case-field",
            "--allow-population-by-field-name",
            "--set-default-enum-member",
            "--formatters", "black", "isort",
            "--custom-file-header", f"# Generated from schema/toolwire.schema.json by editors/python/generate.py. {NOTE}",
        ],
        check=True,
    )
    verbatim(target)


def verbatim(target: Path) -> None:
    """Make every model of provider JSON (those that allow unknown fields)
    a ``Verbatim``, which sends what it was given exactly (see _verbatim.py)."""
    text = target.read_text()
    blocks = re.split(r"(?m)^(?=class )", text)
    out = []
    for block in blocks:
        if block.startswith("class ") and "extra='allow'" in block:
            block = re.sub(r"^class (\w+)\(BaseModel\):", r"class \1(Verbatim):", block, count=1)
        out.append(block)
    text = "".join(out)
    text = text.replace("\nfrom pydantic import ", "\nfrom ._verbatim import Verbatim\nfrom pydantic import ", 1)
    target.write_text(text)


def pascal(method: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[/_.-]", method))


def snake(method: str) -> str:
    return "_".join(re.sub(r"(?<!^)([A-Z])", r"_\1", part).lower() for part in re.split(r"[/.-]", method))


def methods_source() -> str:
    """One typed method per entry of the method table, sync and async."""
    rpc = json.loads(RPC.read_text())
    models = OUT.read_text()
    defined = set(re.findall(r"^class (\w+)\(", models, re.M))
    rows = []
    for method in rpc["methods"]:
        if method.get("x-execution") == "lifecycle":
            continue  # initialize and shutdown belong to the client itself
        params = f"{pascal(method['name'])}Params"
        ref = method["result"]["schema"].get("$ref", "") if isinstance(method["result"]["schema"], dict) else ""
        result = ref.rsplit("/", 1)[-1] or f"{pascal(method['name'])}Result"
        for name in (params, result):
            if name not in defined:
                raise SystemExit(f"generate.py: {method['name']}: no model {name} in models.py")
        progress = any(p["name"] == "workDoneToken" for p in method["params"])
        rows.append((method["name"], snake(method["name"]), params, result, progress, method.get("summary", "")))
    out = [
        f"# Generated from schema/openrpc.json by editors/python/generate.py. {NOTE}",
        '"""The method table: one typed method per toolwire method, for the sync and async clients."""',
        "",
        "from __future__ import annotations",
        "",
        "from collections.abc import Callable",
        "from typing import Any, TypeVar",
        "",
        "from pydantic import BaseModel",
        "",
        "from . import models as m",
        "from ._cancel import CancelToken",
        "",
        '_T = TypeVar("_T", bound=BaseModel)',
        "",
        "#: Every method a client calls (lifecycle aside), in the server's order.",
        f"METHOD_NAMES: tuple[str, ...] = ({', '.join(repr(r[0]) for r in rows)},)",
        "",
        "#: Methods that report ``$/progress`` when their params carry a ``workDoneToken``.",
        f"PROGRESS_METHODS: frozenset[str] = frozenset({{{', '.join(repr(r[0]) for r in rows if r[4])}}})",
        "",
    ]
    for cls, prefix in (("SyncMethods", "def"), ("AsyncMethods", "async def")):
        out += [
            "",
            "",
            f"class {cls}:",
            f'    """Typed wrappers over ``_call``; {"awaitable" if prefix != "def" else "blocking"}."""',
            "",
            f"    {prefix} _call(",
            "        self,",
            "        method: str,",
            "        params: BaseModel,",
            "        result: type[_T],",
            "        cancel: CancelToken | None,",
            "        on_progress: Callable[[Any], None] | None,",
            "    ) -> _T:",
            "        raise NotImplementedError",
        ]
        for name, py, params, result, _progress, summary in rows:
            call = "await self._call" if prefix != "def" else "self._call"
            out += [
                "",
                f"    {prefix} {py}(",
                "        self,",
                f"        params: m.{params},",
                "        *,",
                "        cancel: CancelToken | None = None,",
                "        on_progress: Callable[[Any], None] | None = None,",
                f"    ) -> m.{result}:",
                f'        """``{name}``: {summary}"""',
                f'        return {call}("{name}", params, m.{result}, cancel, on_progress)',
            ]
    return "\n".join(out) + "\n"


if "--check" in sys.argv:
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "models.py"
        generate(fresh)
        stale = [p for p, text in ((OUT, fresh.read_text()), (METHODS, methods_source())) if not p.exists() or p.read_text() != text]
        if stale:
            for p in stale:
                print(f"{p} is stale: run editors/regenerate.sh", file=sys.stderr)
            sys.exit(1)
    print("models.py and _methods.py are up to date")
else:
    generate(OUT)
    METHODS.write_text(methods_source())
    print(f"wrote {OUT} and {METHODS}")
