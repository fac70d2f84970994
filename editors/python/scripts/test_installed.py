#!/usr/bin/env python3
"""Build toolwire-client as a user gets it and test that.

    python scripts/test_installed.py /path/to/toolwire

`python -m build` makes a wheel and an sdist; a fresh venv gets the wheel
(and pytest) installed with pip; tests/ runs there, away from the source
tree, against the real binary. Needs `build` (editors/install.sh puts it in
editors/python/.venv). Everything lives in a temporary directory that is
removed at the end, after the shared daemons the tests started have exited.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
PYTEST = "pytest==9.2.0"


def main() -> int:
    binary = Path(sys.argv[1]).resolve()
    with tempfile.TemporaryDirectory(prefix="toolwire-py-") as tmp_name:
        tmp = Path(tmp_name)
        # README's commands, word for word, from a directory of its own:
        #   python -m build --outdir dist editors/python
        #   pip install dist/toolwire_client-<version>-py3-none-any.whl
        dist = tmp / "dist"
        subprocess.run([sys.executable, "-m", "build", "--outdir", "dist", str(HERE)], check=True, stdout=subprocess.DEVNULL, cwd=tmp)
        version = tomllib.loads((HERE / "pyproject.toml").read_text())["project"]["version"]
        wheel = Path("dist") / f"toolwire_client-{version}-py3-none-any.whl"
        sdist = dist / f"toolwire_client-{version}.tar.gz"
        assert (tmp / wheel).is_file(), f"README's wheel {wheel} is not where it says: {sorted(dist.iterdir())}"
        readme = (HERE / "README.md").read_text()
        for command in ("python -m build --outdir dist editors/python", f"pip install {wheel}"):
            assert command in readme, f"README.md no longer says `{command}`"
        for name in ("toolwire_client/py.typed", "toolwire_client/models.py", "toolwire_client/_methods.py", "toolwire_client/aio.py", "toolwire_client/_verbatim.py"):
            assert name in zipfile.ZipFile(tmp / wheel).namelist(), f"{wheel.name} lacks {name}"
            assert any(n.endswith(name) for n in tarfile.open(sdist).getnames()), f"{sdist.name} lacks {name}"

        venv = tmp / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = venv / "bin" / "python"
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel), PYTEST],
            check=True,
            cwd=tmp,
        )
        tests = tmp / "tests"
        shutil.copytree(HERE / "tests", tests, ignore=shutil.ignore_patterns("__pycache__"))
        runtime = tmp / "run"
        runtime.mkdir(mode=0o700)
        env = {**os.environ, "TOOLWIRE_BIN": str(binary), "XDG_RUNTIME_DIR": str(runtime)}
        env.pop("PYTHONPATH", None)
        code = subprocess.run(
            [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)], cwd=tmp, env=env
        ).returncode
        # The daemons end once idle (the tests ask for 1 s): wait for their
        # sockets to go so that no process outlives the test.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any((runtime / "toolwire").glob("*.sock")):
            time.sleep(0.1)
        return code


if __name__ == "__main__":
    sys.exit(main())
