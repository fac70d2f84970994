//! `artifact/read` end to end: saved outputs read back in pages and
//! searched, only from their own session, and a 1 GB artifact read by the
//! real binary in bounded memory.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::{Value, json};

async fn setup() -> (tempfile::TempDir, MemClient) {
    let dir = tempfile::tempdir().unwrap();
    let (mut client, _task) = connect(new_server());
    // Results over 10 chars are persisted when their preview is shorter.
    client
        .initialize(dir.path(), json!({"limits": {"maxResultChars": 10}}))
        .await;
    (dir, client)
}

/// Save `content` as `id`'s output in `session`, exactly where and as
/// `budget/apply` would; returns the artifact path. These outputs are short,
/// and since PROTOCOL 10.1 `budget/apply` never replaces a result whose
/// preview would be longer, so the test writes through the store itself.
async fn persist(dir: &Path, session: &str, id: &str, content: Value) -> PathBuf {
    use toolwire::artifact::{
        ArtifactKind, ArtifactStore, FsArtifactStore, file_name, session_dir,
    };
    let (kind, bytes) = match &content {
        Value::String(s) => (ArtifactKind::Text, s.as_bytes().to_vec()),
        other => (ArtifactKind::Json, serde_json::to_vec(other).unwrap()),
    };
    let sessions = session_dir(&dir.join(".toolwire"), session);
    std::fs::create_dir_all(&sessions).unwrap();
    let path = sessions.join(file_name(id, kind));
    FsArtifactStore.write_once(&path, &bytes, false).unwrap();
    path
}

async fn read(c: &mut MemClient, params: Value) -> Value {
    c.call("artifact/read", params).await
}

#[tokio::test]
async fn ranges_read_the_stored_bytes_at_every_edge() {
    let (_dir, mut c) = setup().await;
    // CRLF lines, multi-byte characters, no final newline.
    let text = "first line\r\nsecond \u{e9}t\u{e9}\r\n\u{1F600} third\nfourth, no newline";
    let path = persist(_dir.path(), "s", "toolu_1", json!(text)).await;
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);

    let r = read(&mut c, json!({"sessionId": "s", "toolUseId": "toolu_1"})).await;
    assert_eq!(r["text"], json!(text));
    assert_eq!(
        (&r["startLine"], &r["endLine"], &r["totalLines"]),
        (&json!(0), &json!(4), &json!(4))
    );
    assert_eq!(r["totalChars"], json!(text.chars().count()));
    assert_eq!(r["truncated"], json!(false));

    let r = read(
        &mut c,
        json!({"sessionId": "s", "toolUseId": "toolu_1", "offset": 1, "limit": 2}),
    )
    .await;
    assert_eq!(
        r["text"],
        json!("second \u{e9}t\u{e9}\r\n\u{1F600} third\n")
    );
    assert_eq!((&r["startLine"], &r["endLine"]), (&json!(1), &json!(3)));
    assert_eq!(r["truncated"], json!(true));

    // The last line, then past the end.
    let r = read(
        &mut c,
        json!({"sessionId": "s", "toolUseId": "toolu_1", "offset": 3}),
    )
    .await;
    assert_eq!(r["text"], json!("fourth, no newline"));
    assert_eq!(r["truncated"], json!(false));
    let r = read(
        &mut c,
        json!({"sessionId": "s", "toolUseId": "toolu_1", "offset": 50}),
    )
    .await;
    assert_eq!((&r["text"], &r["startLine"]), (&json!(""), &json!(4)));

    // Paging one line at a time gives the artifact back byte for byte.
    let mut joined = String::new();
    let mut offset = 0;
    loop {
        let r = read(
            &mut c,
            json!({"sessionId": "s", "toolUseId": "toolu_1", "offset": offset, "limit": 1}),
        )
        .await;
        joined.push_str(r["text"].as_str().unwrap());
        offset = r["endLine"].as_u64().unwrap();
        if r["truncated"] == json!(false) {
            break;
        }
    }
    assert_eq!(joined, text);
}

#[tokio::test]
async fn sizes_are_counted_in_the_configured_unit() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _task) = connect(new_server());
    c.initialize(
        dir.path(),
        json!({"sizeUnit": "utf16", "limits": {"maxResultChars": 10}}),
    )
    .await;
    let text = "\u{1F600}\u{1F600}\u{1F600} and more text";
    persist(dir.path(), "s", "toolu_1", json!(text)).await;
    let r = read(&mut c, json!({"sessionId": "s", "toolUseId": "toolu_1"})).await;
    assert_eq!(r["totalChars"], json!(text.encode_utf16().count()));
}

#[tokio::test]
async fn grep_shows_numbered_matches_with_merged_context() {
    let (_dir, mut c) = setup().await;
    let log: String = (1..=30)
        .map(|i| {
            if i % 7 == 0 {
                format!("error: step {i} failed\r\n")
            } else {
                format!("ok {i}\r\n")
            }
        })
        .collect();
    persist(_dir.path(), "s", "toolu_log", json!(log)).await;
    let r = read(
        &mut c,
        json!({"sessionId": "s", "toolUseId": "toolu_log", "grep": "^error", "context": 3}),
    )
    .await;
    // Matches at lines 7, 14, 21, 28: the context of 7 and 14 overlaps
    // (lines 4-17 run together), as do those of 14 and 21, and 21 and 28.
    let mut expected = String::new();
    for n in 4..=30 {
        let sep = if n % 7 == 0 { ':' } else { '-' };
        let body = if n % 7 == 0 {
            format!("error: step {n} failed")
        } else {
            format!("ok {n}")
        };
        expected.push_str(&format!("{n}{sep}{body}\n"));
    }
    assert_eq!(r["text"], json!(expected));
    assert_eq!((&r["startLine"], &r["endLine"]), (&json!(3), &json!(30)));
    assert_eq!(r["totalLines"], json!(30));
    assert_eq!(r["truncated"], json!(false));

    // Non-adjacent groups are separated; `limit` pages through matches.
    let r = read(
        &mut c,
        json!({"sessionId": "s", "toolUseId": "toolu_log", "grep": "failed$", "context": 1, "limit": 2}),
    )
    .await;
    assert_eq!(
        r["text"],
        json!(
            "6-ok 6\n7:error: step 7 failed\n8-ok 8\n--\n13-ok 13\n14:error: step 14 failed\n15-ok 15\n"
        )
    );
    assert_eq!(r["truncated"], json!(true));
    let next = r["endLine"].clone();
    let r = read(
        &mut c,
        json!({"sessionId": "s", "toolUseId": "toolu_log", "grep": "failed$", "limit": 5, "offset": next}),
    )
    .await;
    assert_eq!(
        r["text"],
        json!("21:error: step 21 failed\n28:error: step 28 failed\n")
    );
    assert_eq!(r["truncated"], json!(false));

    // Bad patterns and context are invalid params naming the field.
    let e = c
        .fails(
            "artifact/read",
            json!({"sessionId": "s", "toolUseId": "toolu_log", "grep": "(unclosed"}),
            -32602,
        )
        .await;
    assert_eq!(e["data"]["path"], json!("grep"));
    let e = c
        .fails(
            "artifact/read",
            json!({"sessionId": "s", "toolUseId": "toolu_log", "grep": "x", "context": 101}),
            -32602,
        )
        .await;
    assert_eq!(e["data"]["path"], json!("context"));
}

#[tokio::test]
async fn block_array_artifacts_read_as_their_text() {
    let (_dir, mut c) = setup().await;
    let blocks = json!([
        {"type": "text", "text": "alpha\nbeta"},
        {"type": "text", "text": "gamma"}
    ]);
    let path = persist(_dir.path(), "s", "toolu_b", blocks).await;
    assert!(path.to_string_lossy().ends_with(".json"));
    let r = read(&mut c, json!({"sessionId": "s", "toolUseId": "toolu_b"})).await;
    assert_eq!(r["text"], json!("alpha\nbeta\ngamma"));
    assert_eq!(r["totalLines"], json!(3));
}

#[tokio::test]
async fn only_the_sessions_own_artifacts_are_read() {
    let (dir, mut c) = setup().await;
    persist(
        dir.path(),
        "mine",
        "toolu_1",
        json!("a saved output of mine"),
    )
    .await;
    let theirs = persist(
        dir.path(),
        "theirs",
        "toolu_2",
        json!("their secret output"),
    )
    .await;

    let missing = |id: &str, session: &str| json!({"sessionId": session, "toolUseId": id});
    for (session, id) in [
        ("mine", "toolu_2"),
        ("nobody", "toolu_1"),
        ("mine", "../theirs/tool-results/toolu_2"),
        ("mine", "../../theirs/tool-results/toolu_2.txt"),
        ("mine", &theirs.display().to_string()),
        ("mine", ""),
    ] {
        let e = c.fails("artifact/read", missing(id, session), -32015).await;
        assert_eq!(e["data"]["kind"], json!("artifactNotFound"), "{e}");
        assert_eq!(e["data"]["toolUseId"], json!(id));
        assert_eq!(e["data"]["sessionId"], json!(session));
    }
    c.fails(
        "artifact/read",
        json!({"sessionId": "../theirs", "toolUseId": "toolu_2"}),
        -32602,
    )
    .await;

    // A link planted in the session's directory is not followed.
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "do not read").unwrap();
    let link = dir
        .path()
        .join(".toolwire/sessions/mine/tool-results/toolu_link.txt");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    let e = c
        .fails(
            "artifact/read",
            json!({"sessionId": "mine", "toolUseId": "toolu_link"}),
            -32014,
        )
        .await;
    assert!(!e.to_string().contains("do not read"));
}

// ---------------------------------------------------------------- 1 GB --

const GIB: u64 = 1 << 30;
const LINE: usize = 64;
const LINES_PER_BLOCK: u64 = (1 << 20) / LINE as u64;

/// Write a 1 GiB artifact of 64-byte lines: each 1 MiB block starts with a
/// line naming the block, so a page shows where it was read from.
fn write_big_artifact(path: &Path) {
    let filler = format!("{:<63}\n", "the quick brown fox jumps over the lazy dog");
    let mut block = filler.repeat(LINES_PER_BLOCK as usize).into_bytes();
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for k in 0..(GIB >> 20) {
        let head = format!("{:<63}\n", format!("block {k:04}"));
        block[..LINE].copy_from_slice(head.as_bytes());
        file.write_all(&block).unwrap();
    }
    file.flush().unwrap();
}

fn free_bytes(dir: &Path) -> u64 {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and an out-pointer to a statvfs.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0);
    s.f_bavail as u64 * s.f_frsize as u64
}

/// A workspace with room for a 1 GiB file: the temporary directory when
/// its disk has the room, else one in memory (`/dev/shm`), since a fresh CI
/// machine may have less than a gigabyte of disk left after the build. The
/// reader's memory is measured the same way on both: a file's pages in the
/// page cache are not the reading process's own.
fn big_file_dir() -> tempfile::TempDir {
    let disk = tempfile::tempdir().unwrap();
    if free_bytes(disk.path()) > 3 * GIB {
        return disk;
    }
    let shm = Path::new("/dev/shm");
    let in_memory = shm.is_dir() && free_bytes(shm) > 3 * GIB;
    assert!(
        in_memory,
        "this test writes a 1 GiB file; only {} MiB free in {} and {} MiB in /dev/shm",
        free_bytes(disk.path()) >> 20,
        disk.path().display(),
        if shm.is_dir() {
            free_bytes(shm) >> 20
        } else {
            0
        }
    );
    eprintln!(
        "{} has {} MiB free: the 1 GiB file goes to /dev/shm",
        disk.path().display(),
        free_bytes(disk.path()) >> 20
    );
    tempfile::tempdir_in(shm).unwrap()
}

/// `VmRSS` and `VmHWM` (peak) of a process, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .unwrap()
    };
    (field("VmRSS:"), field("VmHWM:"))
}

#[tokio::test]
async fn a_1gb_artifact_is_read_in_pages_in_bounded_memory() {
    // The figure is the reader's memory on a file, which the backend does
    // not change; a gigabyte written again would only lengthen the matrix.
    if !common::local_only(
        "a_1gb_artifact_is_read_in_pages_in_bounded_memory",
        "measures reading a file the backend does not change",
    ) {
        return;
    }
    let dir = big_file_dir();
    let artifacts = dir.path().join(".toolwire/sessions/big/tool-results");
    std::fs::create_dir_all(&artifacts).unwrap();
    let path = artifacts.join("toolu_big.txt");
    write_big_artifact(&path);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), GIB);

    let (mut c, child) = spawn_binary(dir.path());
    let pid = child.id().unwrap();
    c.initialize(dir.path(), json!({})).await;
    let (_, before) = memory_kib(pid);

    let total_lines = GIB / LINE as u64;
    // The middle: the last filler line of block 511, then block 512's head.
    let middle = 512 * LINES_PER_BLOCK - 1;
    let r = c
        .call(
            "artifact/read",
            json!({"sessionId": "big", "toolUseId": "toolu_big", "offset": middle, "limit": 2}),
        )
        .await;
    let head = |k: u64| format!("{:<63}\n", format!("block {k:04}"));
    let filler = format!("{:<63}\n", "the quick brown fox jumps over the lazy dog");
    assert_eq!(r["text"], json!(format!("{filler}{}", head(512))));
    assert_eq!(r["totalLines"], json!(total_lines));
    assert_eq!(r["totalChars"], json!(GIB));
    assert_eq!(r["truncated"], json!(true));

    // Full pages at the start, the middle and the end.
    for offset in [0, middle, total_lines - 2000] {
        let r = c
            .call(
                "artifact/read",
                json!({"sessionId": "big", "toolUseId": "toolu_big", "offset": offset}),
            )
            .await;
        assert_eq!(r["text"].as_str().unwrap().len(), 2000 * LINE);
        assert_eq!(r["endLine"], json!(offset + 2000));
    }
    // A grep streams the whole gigabyte.
    let r = c
        .call(
            "artifact/read",
            json!({"sessionId": "big", "toolUseId": "toolu_big", "grep": "^block 10(22|23)", "context": 1}),
        )
        .await;
    let n = 1022 * LINES_PER_BLOCK + 1;
    assert_eq!(
        r["text"],
        json!(format!(
            "{}-{}\n{}:{}\n{}-{}\n--\n{}-{}\n{}:{}\n{}-{}\n",
            n - 1,
            filler.trim_end_matches('\n'),
            n,
            head(1022).trim_end_matches('\n'),
            n + 1,
            filler.trim_end_matches('\n'),
            n + LINES_PER_BLOCK - 1,
            filler.trim_end_matches('\n'),
            n + LINES_PER_BLOCK,
            head(1023).trim_end_matches('\n'),
            n + LINES_PER_BLOCK + 1,
            filler.trim_end_matches('\n'),
        ))
    );

    let (rss, peak) = memory_kib(pid);
    eprintln!("server VmHWM {before} KiB before reading, {peak} KiB after (VmRSS {rss} KiB)");
    assert!(
        peak < before + 8 * 1024,
        "reading a 1 GiB artifact grew the server's peak memory from {before} KiB to {peak} KiB"
    );
    drop(c);
    drop(child);
    std::fs::remove_file(&path).unwrap();
}

#[tokio::test]
async fn toolwire_show_prints_lines_and_matches() {
    let (dir, _c) = setup().await;
    let log: String = (1..=5000).map(|i| format!("line {i}\n")).collect();
    persist(dir.path(), "s", "toolu_log", json!(log)).await;
    let show = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
            .arg("show")
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let out = show(&["s", "toolu_log", "--lines", "2:3"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "line 2\nline 3\n");
    // The whole output, across several pages, byte for byte.
    let out = show(&["s", "toolu_log"]);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), log);
    let out = show(&["s", "toolu_log", "--lines", "4999:"]);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "line 4999\nline 5000\n"
    );
    let out = show(&["s", "toolu_log", "--grep", "^line 4(0|99)9$", "-C", "1"]);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "408-line 408\n409:line 409\n410-line 410\n--\n4998-line 4998\n4999:line 4999\n5000-line 5000\n"
    );
    let out = show(&["s", "toolu_nope"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("no saved output for tool_use_id `toolu_nope`"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A large output's line index is kept beside it (`<name>.idx`): written
/// once by the first process that reads a page, by `toolwire show` and by
/// `artifact/read` alike, and never trusted past what it was made for: a
/// corrupt, stale or unwritable index still gives the right page.
#[tokio::test]
async fn a_large_outputs_line_index_is_kept_beside_it_and_never_gives_a_wrong_page() {
    use std::os::unix::fs::MetadataExt;
    let (dir, mut c) = setup().await;
    // Over a megabyte (smaller outputs are indexed in passing), with lines
    // of many lengths.
    let log: String = (1..=150_000)
        .map(|i| format!("line {i} {}\n", "=".repeat(i % 17)))
        .collect();
    let path = persist(dir.path(), "s", "toolu_log", json!(log)).await;
    let index = toolwire::artifact::index::index_path(&path);
    assert_eq!(index, PathBuf::from(format!("{}.idx", path.display())));
    let page = |text: &str, a: usize, b: usize| -> String {
        text.lines()
            .skip(a - 1)
            .take(b - a + 1)
            .map(|l| format!("{l}\n"))
            .collect()
    };
    let show = |a: usize, b: usize| {
        let out = output_ok(
            std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
                .args(["show", "s", "toolu_log", "--lines", &format!("{a}:{b}")])
                .current_dir(dir.path()),
        );
        String::from_utf8(out).unwrap()
    };
    let stamp = |p: &Path| {
        let m = std::fs::symlink_metadata(p).unwrap();
        (m.ino(), m.mtime(), m.mtime_nsec(), m.file_type().is_file())
    };

    // `artifact/read` over JSON-RPC writes it...
    assert!(!index.exists());
    let r = read(
        &mut c,
        json!({"sessionId": "s", "toolUseId": "toolu_log", "offset": 70_000, "limit": 3}),
    )
    .await;
    assert_eq!(r["text"], json!(page(&log, 70_001, 70_003)));
    let written = stamp(&index);
    assert!(written.3);
    // ...and later processes read it, never writing it again.
    for (a, b) in [(1, 5), (75_000, 77_000), (149_990, 150_000)] {
        assert_eq!(show(a, b), page(&log, a, b));
        assert_eq!(stamp(&index), written, "written once");
    }
    // No leftover temporary file beside it.
    let names: Vec<String> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");

    // Corrupt or cut short (as a crash could leave it): ignored, rebuilt.
    let good = std::fs::read(&index).unwrap();
    for bad in [
        b"not an index".to_vec(),
        good[..good.len() / 2].to_vec(),
        vec![0u8; good.len()],
        String::from_utf8(good.clone())
            .unwrap()
            .replacen("\"total_lines\":150000", "\"total_lines\":150001", 1)
            .into_bytes(),
    ] {
        std::fs::write(&index, &bad).unwrap();
        assert_eq!(show(100_000, 100_400), page(&log, 100_000, 100_400));
        assert_eq!(std::fs::read(&index).unwrap(), good, "rebuilt as it was");
    }

    // Stale: the output replaced by one of the same size with other lines
    // (the index would place every line wrong) and another mtime.
    let mut other = String::new();
    for i in 1.. {
        let line = format!("other {i}\n");
        if other.len() + line.len() > log.len() {
            break;
        }
        other.push_str(&line);
    }
    other.push_str(&"y".repeat(log.len() - other.len()));
    assert_eq!(other.len(), log.len());
    std::fs::write(&path, &other).unwrap();
    age(&path);
    assert_eq!(show(90_000, 90_010), page(&other, 90_000, 90_010));
    assert_ne!(
        std::fs::read(&index).unwrap(),
        good,
        "rebuilt for the new output"
    );

    // Where no index can be written, the page is still right.
    std::fs::remove_file(&index).unwrap();
    std::fs::create_dir(&index).unwrap();
    assert_eq!(show(60_000, 60_002), page(&other, 60_000, 60_002));
    assert!(index.is_dir());
    std::fs::remove_dir(&index).unwrap();
    // A link in its place is never followed, neither read nor written
    // through: it is replaced by a real index.
    let target = dir.path().join("elsewhere");
    std::fs::write(&target, &good).unwrap();
    std::os::unix::fs::symlink(&target, &index).unwrap();
    assert_eq!(show(10, 20), page(&other, 10, 20));
    assert_eq!(std::fs::read(&target).unwrap(), good);
    assert!(stamp(&index).3, "a regular file now");
}

/// Move a file's modification time a minute back.
fn age(path: &Path) {
    let file = std::fs::File::options().write(true).open(path).unwrap();
    let when = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    file.set_modified(when).unwrap();
}
