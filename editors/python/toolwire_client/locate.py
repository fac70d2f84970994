"""Find the toolwire binary: a setting, then ``TOOLWIRE_BIN``, then the
binary of the ``toolwire`` wheel installed for this interpreter, then ``PATH``."""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path


class ToolwireNotFoundError(FileNotFoundError):
    """No usable binary; ``searched`` names every place looked at."""

    def __init__(self, searched: list[str]) -> None:
        lines = "\n".join(f"  - {s}" for s in searched)
        super().__init__(
            f"toolwire binary not found; looked at:\n{lines}\n"
            "Install toolwire (pip install toolwire, npm install toolwire or cargo install toolwire) or set the binary path."
        )
        self.searched = searched


def _problem(path: Path) -> str | None:
    if not path.exists():
        return "does not exist"
    if not path.is_file():
        return "not a file"
    if not os.access(path, os.X_OK):
        return "not executable"
    return None


def _wheel_scripts() -> list[Path]:
    """Where ``pip install toolwire`` (or ``uv pip install``) puts the binary
    for the interpreter running this client: its scripts directory, and
    outside a virtual environment also the user scheme's (``pip install
    --user``), as ruff's own ``find_ruff_bin`` looks."""
    dirs = [sysconfig.get_path("scripts")]
    if sys.prefix == sys.base_prefix:
        dirs.append(sysconfig.get_path("scripts", scheme=sysconfig.get_preferred_scheme("user")))
    seen: list[Path] = []
    for d in dirs:
        if d and Path(d) not in seen:
            seen.append(Path(d))
    return seen


def locate_toolwire(
    binary: str | os.PathLike[str] | None = None,
    *,
    setting_name: str = "setting",
    env: Mapping[str, str] | None = None,
) -> Path:
    """The absolute path of the toolwire binary, or ``ToolwireNotFoundError``.

    An explicit ``binary`` (or ``TOOLWIRE_BIN``) that does not work is an
    error of its own, never a silent fallback to another toolwire.
    """
    env = os.environ if env is None else env
    searched: list[str] = []
    if binary is not None and str(binary).strip():
        path = Path(binary).expanduser().absolute()
        problem = _problem(path)
        if problem is None:
            return path
        raise ToolwireNotFoundError([f"{setting_name}: {path} ({problem})"])
    searched.append(f"{setting_name}: not set")
    from_env = env.get("TOOLWIRE_BIN", "").strip()
    if from_env:
        path = Path(from_env).expanduser().absolute()
        problem = _problem(path)
        if problem is None:
            return path
        raise ToolwireNotFoundError([*searched, f"TOOLWIRE_BIN: {path} ({problem})"])
    searched.append("TOOLWIRE_BIN: not set")
    # Before PATH: the toolwire pinned beside this client in its environment
    # is the one it was installed to run, not an older one on PATH.
    for d in _wheel_scripts():
        candidate = d / "toolwire"
        problem = _problem(candidate)
        if problem is None:
            return candidate
        searched.append(f"pip package: {candidate} ({problem})")
    dirs = [d for d in env.get("PATH", "").split(os.pathsep) if d and os.path.isabs(d)]
    for d in dirs:
        candidate = Path(d) / "toolwire"
        if _problem(candidate) is None:
            return candidate
    searched.append(f"PATH: no executable 'toolwire' in {os.pathsep.join(dirs) if dirs else '(empty)'}")
    raise ToolwireNotFoundError(searched)
