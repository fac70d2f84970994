#!/usr/bin/env python3
"""Build the pip wheel and the npm packages of toolwire around one built binary.

    python3 packaging/package.py                      # cargo build --release, then package it
    python3 packaging/package.py --binary PATH        # package a binary built elsewhere
    python3 packaging/package.py --out DIR --only wheel

Writes into --out (default target/packages):

  toolwire-<version>-py3-none-<platform>.whl   the binary as the wheel's script
  toolwire-<platform>-<version>.tgz            npm: the binary, chosen by os/cpu/libc
  toolwire-<version>.tgz                       npm: the `toolwire` command, a launcher

The crate is compiled once (or not at all, with --binary): both packages
carry the very file given, as ruff, uv, biome and esbuild ship theirs. The
platform in the names and tags is read from the binary itself (its ELF
header, interpreter, the libraries and glibc symbol versions it needs), so
a wheel never claims to run where its binary would not start. The version
is Cargo.toml's; the committed npm launcher must say the same number, or
nothing is built. Needs Python >= 3.11 and, for the npm packages, npm.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "packaging"

# The libraries every manylinux system provides (PEP 600 defers to the
# auditwheel policy; these are its list minus the graphics libraries). A
# binary that needs any other cannot honestly carry a manylinux tag.
MANYLINUX_LIBS = {
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "librt.so.1",
    "libpthread.so.0",
    "libutil.so.1",
    "libresolv.so.2",
    "libnsl.so.1",
    "libgcc_s.so.1",
    "libstdc++.so.6",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
}

# ELF e_machine -> (wheel arch, npm cpu)
MACHINES = {62: ("x86_64", "x64"), 183: ("aarch64", "arm64")}


class PackagingError(Exception):
    pass


@dataclass
class Platform:
    """What the binary needs to run, read from its ELF file."""

    wheel_arch: str
    npm_cpu: str
    libc: str  # "glibc", "musl" or "static"
    glibc: tuple[int, int] | None  # the newest GLIBC_x.y symbol version it needs
    needed: list[str]

    def wheel_tag(self) -> str:
        arch = self.wheel_arch
        if self.libc == "static":
            # Needs no libc at all: runs on any Linux of this architecture.
            return f"manylinux_2_17_{arch}.manylinux2014_{arch}.musllinux_1_1_{arch}"
        if self.libc == "musl":
            return f"musllinux_1_2_{arch}"
        assert self.glibc is not None
        major, minor = self.glibc
        tag = f"manylinux_{major}_{minor}_{arch}"
        # pip before 20.3 knows only the legacy alias of 2.17.
        if (major, minor) <= (2, 17):
            tag = f"manylinux_2_17_{arch}.manylinux2014_{arch}"
        return tag

    def npm_package(self) -> str:
        # glibc keeps the plain name (the common case, as biome does); musl
        # and static builds get their own package next to it.
        suffix = "" if self.libc == "glibc" else f"-{self.libc}"
        return f"toolwire-linux-{self.npm_cpu}{suffix}"

    def npm_libc(self) -> list[str] | None:
        return {"glibc": ["glibc"], "musl": ["musl"]}.get(self.libc)


def read_elf(path: Path) -> Platform:
    """The platform `path` runs on, from its ELF header and dynamic section."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF":
        raise PackagingError(f"{path}: not an ELF executable (only Linux binaries are packaged)")
    if data[4] != 2 or data[5] != 1:
        raise PackagingError(f"{path}: not a 64-bit little-endian ELF file")
    machine = struct.unpack_from("<H", data, 18)[0]
    if machine not in MACHINES:
        raise PackagingError(f"{path}: ELF machine {machine} is neither x86_64 nor aarch64")
    phoff, shoff = struct.unpack_from("<QQ", data, 32)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 54)

    interp = None
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 3:  # PT_INTERP
            interp = data[p_offset : p_offset + p_filesz].rstrip(b"\0").decode()

    sections = []
    for i in range(shnum):
        name, sh_type, _, _, offset, size, link, _, _, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, shoff + i * shentsize
        )
        sections.append((sh_type, offset, size, link, entsize))

    def string(table: int, at: int) -> str:
        start = sections[table][1] + at
        return data[start : data.index(b"\0", start)].decode()

    needed: list[str] = []
    versions: set[str] = set()
    for sh_type, offset, size, link, entsize in sections:
        if sh_type == 6:  # SHT_DYNAMIC: DT_NEEDED entries name the libraries
            for at in range(offset, offset + size, entsize or 16):
                tag, value = struct.unpack_from("<qQ", data, at)
                if tag == 0:
                    break
                if tag == 1:
                    needed.append(string(link, value))
        elif sh_type == 0x6FFFFFFE:  # SHT_GNU_verneed: versions per library
            at = offset
            while True:
                _, vn_cnt, _, vn_aux, vn_next = struct.unpack_from("<HHIII", data, at)
                aux = at + vn_aux
                for _ in range(vn_cnt):
                    _, _, _, vna_name, vna_next = struct.unpack_from("<IHHII", data, aux)
                    versions.add(string(link, vna_name))
                    aux += vna_next
                if vn_next == 0:
                    break
                at += vn_next

    wheel_arch, npm_cpu = MACHINES[machine]
    if interp is None and not needed:
        return Platform(wheel_arch, npm_cpu, "static", None, [])
    if interp is not None and "ld-musl" in interp:
        return Platform(wheel_arch, npm_cpu, "musl", None, needed)
    others = sorted(set(needed) - MANYLINUX_LIBS)
    if others:
        raise PackagingError(
            f"{path} needs {', '.join(others)}, which manylinux systems need not have: "
            "link them statically or build for musl (docs/cli.md, 'Building for another platform')"
        )
    glibc = [tuple(int(p) for p in v[6:].split(".")[:2]) for v in versions if v.startswith("GLIBC_2.")]
    if not glibc:
        raise PackagingError(f"{path}: a dynamic glibc executable that names no GLIBC_ symbol version")
    return Platform(wheel_arch, npm_cpu, "glibc", max(glibc), needed)


def cargo_version() -> str:
    with open(ROOT / "Cargo.toml", "rb") as f:
        return tomllib.load(f)["package"]["version"]


def zip_entry(name: str, mode: int) -> zipfile.ZipInfo:
    # A fixed date: the same binary gives the same wheel, byte for byte.
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.external_attr = (0o100000 | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def build_wheel(binary: Path, platform: Platform, version: str, out: Path) -> Path:
    """A wheel whose only content is the binary as a script (what maturin's
    `bindings = "bin"` makes): pip and uv put it in the environment's bin/."""
    summary = read_summary()
    dist_info = f"toolwire-{version}.dist-info"
    tag = platform.wheel_tag()
    metadata = "\n".join(
        [
            "Metadata-Version: 2.1",
            "Name: toolwire",
            f"Version: {version}",
            f"Summary: {summary}",
            "License: MIT",
            "Classifier: License :: OSI Approved :: MIT License",
            "Classifier: Programming Language :: Rust",
            "Classifier: Environment :: Console",
            "Classifier: Operating System :: POSIX :: Linux",
            "Description-Content-Type: text/markdown",
            "",
            (HERE / "PACKAGE.md").read_text(),
        ]
    )
    wheel_meta = "".join(
        f"{line}\n"
        for line in [
            "Wheel-Version: 1.0",
            "Generator: toolwire packaging/package.py",
            "Root-Is-Purelib: false",
            *(f"Tag: py3-none-{t}" for t in tag.split(".")),
        ]
    )
    files = [
        (f"toolwire-{version}.data/scripts/toolwire", binary.read_bytes(), 0o755),
        (f"{dist_info}/METADATA", metadata.encode(), 0o644),
        (f"{dist_info}/WHEEL", wheel_meta.encode(), 0o644),
        (f"{dist_info}/LICENSE", (ROOT / "LICENSE").read_bytes(), 0o644),
    ]
    record = io.StringIO()
    for name, content, _ in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
        record.write(f"{name},sha256={digest},{len(content)}\n")
    record.write(f"{dist_info}/RECORD,,\n")
    files.append((f"{dist_info}/RECORD", record.getvalue().encode(), 0o644))

    wheel = out / f"toolwire-{version}-py3-none-{tag}.whl"
    partial = wheel.with_suffix(".partial")
    with zipfile.ZipFile(partial, "w") as zf:
        for name, content, mode in files:
            zf.writestr(zip_entry(name, mode), content)
    partial.replace(wheel)
    return wheel


def read_summary() -> str:
    with open(ROOT / "Cargo.toml", "rb") as f:
        return tomllib.load(f)["package"]["description"]


def npm(args: list[str], cwd: Path) -> str:
    npm_bin = shutil.which("npm")
    if npm_bin is None:
        raise PackagingError("npm is needed for the npm packages: apt-get install npm (or --only wheel)")
    done = subprocess.run([npm_bin, *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise PackagingError(f"npm {' '.join(args)} failed in {cwd}:\n{done.stdout}{done.stderr}")
    return done.stdout


def launcher_manifest(version: str) -> dict:
    """The committed launcher's package.json, checked against Cargo.toml."""
    manifest = json.loads((HERE / "npm/toolwire/package.json").read_text())
    wrong = {
        name: v
        for name, v in {"version": manifest.get("version"), **manifest.get("optionalDependencies", {})}.items()
        if v != version
    }
    if wrong:
        raise PackagingError(
            f"packaging/npm/toolwire/package.json says {wrong}, Cargo.toml says {version}: "
            "one version everywhere (docs/cli.md, 'Versions')"
        )
    return manifest


def build_npm(binary: Path, platform: Platform, version: str, out: Path) -> list[Path]:
    """The platform package carrying the binary, and the launcher package
    that depends on it (optionalDependencies: npm installs only the one whose
    os, cpu and libc match the machine)."""
    manifest = launcher_manifest(version)
    name = platform.npm_package()
    if name not in manifest["optionalDependencies"]:
        raise PackagingError(
            f"{binary} is for {name}, which packaging/npm/toolwire/package.json does not list "
            "in optionalDependencies (nor does its index.js): add it to both"
        )
    tarballs = []
    with tempfile.TemporaryDirectory(prefix="toolwire-npm-") as tmp:
        pkg = Path(tmp) / name
        (pkg / "bin").mkdir(parents=True)
        shutil.copyfile(binary, pkg / "bin/toolwire")
        (pkg / "bin/toolwire").chmod(0o755)
        shutil.copyfile(ROOT / "LICENSE", pkg / "LICENSE")
        (pkg / "README.md").write_text(
            f"# {name}\n\nThe toolwire {version} binary for Linux {platform.npm_cpu}"
            f" ({platform.libc}). Install the `toolwire` package, which depends on this one"
            " on the machines it runs on.\n"
        )
        platform_manifest = {
            "name": name,
            "version": version,
            "description": f"The toolwire binary for Linux {platform.npm_cpu} ({platform.libc})",
            "license": "MIT",
            "os": ["linux"],
            "cpu": [platform.npm_cpu],
            "files": ["bin/toolwire"],
            # Yarn's plug'n'play must leave the executable on disk.
            "preferUnplugged": True,
        }
        if platform.npm_libc():
            platform_manifest["libc"] = platform.npm_libc()
        (pkg / "package.json").write_text(json.dumps(platform_manifest, indent=2) + "\n")
        launcher = Path(tmp) / "toolwire"
        shutil.copytree(HERE / "npm/toolwire", launcher)
        shutil.copyfile(ROOT / "LICENSE", launcher / "LICENSE")
        shutil.copyfile(HERE / "PACKAGE.md", launcher / "README.md")
        for folder in (pkg, launcher):
            packed = json.loads(npm(["pack", "--json", "--pack-destination", str(out)], folder))
            tarballs.append(out / packed[0]["filename"])
    return tarballs


def cargo_build_release() -> Path:
    cargo = os.environ.get("CARGO", "cargo")
    start = time.monotonic()
    subprocess.run([cargo, "build", "--release", "--locked", "--bin", "toolwire"], cwd=ROOT, check=True)
    print(f"cargo build --release: {time.monotonic() - start:.0f} s", file=sys.stderr)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "release/toolwire"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", type=Path, help="the toolwire binary to package (default: cargo build --release)")
    parser.add_argument("--out", type=Path, default=ROOT / "target/packages", help="where to write (default target/packages)")
    parser.add_argument("--only", choices=["wheel", "npm"], help="build only one kind")
    args = parser.parse_args()
    try:
        version = cargo_version()
        binary = (args.binary or cargo_build_release()).resolve()
        if not os.access(binary, os.X_OK):
            raise PackagingError(f"{binary}: no executable there")
        platform = read_elf(binary)
        args.out.mkdir(parents=True, exist_ok=True)
        out = args.out.resolve()
        built = []
        if args.only in (None, "wheel"):
            built.append(build_wheel(binary, platform, version, out))
        if args.only in (None, "npm"):
            built.extend(build_npm(binary, platform, version, out))
    except PackagingError as err:
        print(f"package.py: {err}", file=sys.stderr)
        return 1
    for path in built:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
