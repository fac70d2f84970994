//! The editor integrations and client packages, installed the way a user
//! installs them and driven against the built binary: the TypeScript
//! package from its `npm pack` tarball, the Python package from its wheel,
//! the Neovim plugin as a native package in headless Neovim, the VS Code
//! extension from its `.vsix` in code-server driven by headless Chromium.
//! Each fails when its generated files are stale.
//!
//! Needs the pinned packages `editors/install.sh` installs (README's test
//! command runs it first).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The TypeScript package test rebuilds `editors/typescript/dist` (`npm
/// pack`), which the VS Code extension's bundle is built from: one at a time.
static TYPESCRIPT_DIST: Mutex<()> = Mutex::new(());

fn editors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("editors")
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e} (run editors/install.sh first)"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn typescript_package_installs_from_its_tarball_and_drives_the_binary() {
    let _dist = TYPESCRIPT_DIST.lock().unwrap_or_else(|e| e.into_inner());
    let dir = editors().join("typescript");
    assert!(
        dir.join("node_modules").is_dir(),
        "editors/typescript/node_modules is missing: run editors/install.sh"
    );
    run(
        Command::new("node")
            .args(["scripts/gen.mjs", "--check"])
            .current_dir(&dir),
        "protocol.ts and methods.ts freshness",
    );
    // `npm pack` (which builds with tsc --strict), install the tarball in a
    // scratch project, compile a strict consumer against it, run it.
    run(
        Command::new("node")
            .arg("test/run.mjs")
            .arg(env!("CARGO_BIN_EXE_toolwire"))
            .current_dir(&dir),
        "typescript package test",
    );
}

#[test]
fn python_package_builds_installs_from_its_wheel_and_drives_the_binary() {
    let dir = editors().join("python");
    let python = dir.join(".venv/bin/python");
    assert!(
        python.exists(),
        "editors/python/.venv is missing: run editors/install.sh"
    );
    run(
        Command::new(&python)
            .args(["generate.py", "--check"])
            .current_dir(&dir),
        "models.py and _methods.py freshness",
    );
    // `python -m build` (wheel + sdist), the wheel into a fresh venv, pytest
    // there against the binary.
    run(
        Command::new(&python)
            .arg("scripts/test_installed.py")
            .arg(env!("CARGO_BIN_EXE_toolwire"))
            .current_dir(&dir),
        "python package test",
    );
}

#[test]
fn neovim_plugin_installed_as_a_package_drives_the_binary_headless() {
    // The plugin as a native package, every command, in `nvim --headless`.
    run(
        Command::new("bash")
            .arg(editors().join("nvim/test/run.sh"))
            .arg(env!("CARGO_BIN_EXE_toolwire")),
        "neovim plugin test (needs `apt-get install neovim` and Neovim 0.11.4 from editors/nvim/test/install-neovim.sh)",
    );
}

#[test]
fn vscode_extension_installed_from_its_vsix_runs_in_code_server() {
    let _dist = TYPESCRIPT_DIST.lock().unwrap_or_else(|e| e.into_inner());
    let dir = editors().join("vscode");
    assert!(
        dir.join("node_modules").is_dir(),
        "editors/vscode/node_modules is missing: run editors/install.sh"
    );
    // tsc --strict, the .vsix, code-server + headless Chromium, every
    // command; the screenshot is kept under target/.
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../editors/vscode.png");
    run(
        Command::new("node")
            .arg("test/e2e.mjs")
            .arg(env!("CARGO_BIN_EXE_toolwire"))
            .arg(&shot)
            .current_dir(&dir),
        "VS Code extension in code-server (needs the Debian packages of .ci/apt/editors.txt)",
    );
}
