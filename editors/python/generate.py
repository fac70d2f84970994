#!/usr/bin/env python3
"""Generate toolwire_client/models.py from toolwire's bundled JSON Schema.

    .venv/bin/python generate.py           # rewrite the models
    .venv/bin/python generate.py --check   # exit 1 when they are stale

The schema is ../../schema/toolwire.schema.json, itself generated from the
Rust types by `toolwire schema --out schema`.
"""
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMA = HERE.parent.parent / "schema" / "toolwire.schema.json"
OUT = HERE / "toolwire_client" / "models.py"


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
            "--custom-file-header", "# Generated from schema/toolwire.schema.json by editors/python/generate.py. Do not edit.",
        ],
        check=True,
    )


if "--check" in sys.argv:
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "models.py"
        generate(fresh)
        if not OUT.exists() or OUT.read_text() != fresh.read_text():
            print(f"{OUT} is stale: run {HERE / '.venv/bin/python'} {Path(__file__).name}", file=sys.stderr)
            sys.exit(1)
    print("models.py is up to date")
else:
    generate(OUT)
    print(f"wrote {OUT}")
