//! Saved outputs: retention and paged reads, each next to a baseline
//! measured in the same run on the same files.
//!
//!     cargo bench --bench saved_outputs            # both (a few minutes, ~3 GB of disk)
//!     cargo bench --bench saved_outputs -- gc      # or: read, objects
//!
//! - **gc**: `toolwire gc` on a store of 10,000 sessions and 100,000
//!   artifacts (each session a transcript whose replacement lines point at
//!   its ten artifacts), every session expired, next to `find -delete` of
//!   an identical store; and a run that finds nothing to remove (it still
//!   reads every transcript and stats every file) next to `find -type f`.
//!   Time and peak resident memory of each process (`wait4`'s
//!   `ru_maxrss`), toolwire's next to the baseline's.
//! - **read**: a page of 2000 lines from the middle of a 1 GiB artifact:
//!   `toolwire show --lines A:B` next to `sed -n 'A,Bp;Bq'` (which reads up
//!   to the page), each a fresh process, median of seven alternated runs:
//!   the first `show` makes one pass to index the artifact and keeps the
//!   index beside it (printed on its own), every later one reads that
//!   index. Then the same read in process once the index is cached (what
//!   a server pays for every later page). The file is in the page cache
//!   for both (it was just written); the caches are not dropped, the
//!   machine being shared.
//! - **objects** (needs tests/setup.d/50-objects.sh): on a real S3 server
//!   (moto) on loopback, writing a 1 MB artifact create-only (with its line
//!   index) next to the local store's durable write, and a page of 2000
//!   lines from the middle of a 64 MB artifact by ranged reads next to the
//!   local store's page once its index is cached.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

#[path = "../tests/common/s3.rs"]
mod s3;
mod support;

use toolwire::artifact::read::{ReadRequest, read_artifact};
use toolwire::format::SizeUnit;
use toolwire::protocol::SessionId;

const SESSIONS: usize = 10_000;
const PER_SESSION: usize = 10;

fn main() {
    support::begin("saved_outputs");
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let want = |name: &str| args.is_empty() || args.iter().any(|a| a == name);
    if want("gc") {
        gc();
    }
    if want("read") {
        read();
    }
    if want("objects") {
        objects();
    }
}

/// Peak resident memory of the largest child waited for so far, in KiB.
fn children_maxrss() -> i64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    usage.ru_maxrss
}

/// Run `cmd`, returning its wall time and its own peak resident memory
/// (KiB), as the kernel counted it for that one process (`wait4`'s
/// `ru_maxrss`): not the largest of every child so far, which would let
/// an earlier, larger run hide a later one.
// The child is reaped by `wait4` itself (std's `wait` would not give the
// usage), which the lint cannot see.
#[allow(clippy::zombie_processes)]
fn timed(cmd: &mut Command) -> (Duration, i64) {
    use std::os::unix::process::ExitStatusExt;
    let start = Instant::now();
    // Both outputs go to pipes, drained as they come, as `output()` would
    // (never /dev/null, which GNU grep notices and stops early for).
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run command");
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let drain = std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let mut status = 0;
    // SAFETY: wait4 fills the status and the struct it is given, for the
    // child this function spawned and nobody else waits for.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    let took = start.elapsed();
    assert_eq!(pid, child.id() as libc::pid_t, "wait4 failed");
    let status = std::process::ExitStatus::from_raw(status);
    let _ = drain.join();
    let stderr = reader.join().unwrap_or_default();
    assert!(status.success(), "{cmd:?}: {stderr}");
    (took, usage.ru_maxrss)
}

fn sync() {
    let _ = Command::new("sync").status();
}

/// A store of `SESSIONS` sessions with `PER_SESSION` artifacts each, all
/// last written `age` ago.
fn make_store(data_dir: &Path, age: Duration) {
    let sessions = data_dir.join("sessions");
    let when = SystemTime::now() - age;
    let body = "x".repeat(1000);
    for s in 0..SESSIONS {
        let id = format!("session-{s:05}");
        let results = sessions.join(&id).join("tool-results");
        std::fs::create_dir_all(&results).unwrap();
        let mut transcript = String::new();
        for a in 0..PER_SESSION {
            let name = format!("toolu_{s:05}_{a:02}.txt");
            let path = results.join(&name);
            let file = std::fs::File::create(&path).unwrap();
            (&file).write_all(body.as_bytes()).unwrap();
            file.set_modified(when).unwrap();
            let replacement = format!(
                "<persisted-output>\nOutput too large (1000 bytes). Full output saved to: {}\n\nPreview (first 20 bytes):\nxxxxxxxxxxxxxxxxxxxx\n...\n</persisted-output>",
                path.display()
            );
            let line = serde_json::json!({"type": "replacement", "record": {"kind": "tool-result", "toolUseId": format!("toolu_{s:05}_{a:02}"), "replacement": replacement}});
            transcript.push_str(&line.to_string());
            transcript.push('\n');
        }
        let tpath = sessions.join(format!("{id}.jsonl"));
        std::fs::write(&tpath, transcript).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&tpath)
            .unwrap()
            .set_modified(when)
            .unwrap();
    }
}

fn gc() {
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let toolwire = env!("CARGO_BIN_EXE_toolwire");
    println!(
        "gc: {SESSIONS} sessions, {} artifacts of 1000 bytes",
        SESSIONS * PER_SESSION
    );

    // Nothing to remove: a full scan (every transcript read, every file
    // stat'ed) next to a traversal that stats every file.
    let ws = root.path().join("keep");
    std::fs::create_dir_all(&ws).unwrap();
    make_store(&ws.join(".toolwire"), Duration::from_secs(3600 * 2));
    sync();
    let (scan, scan_rss) = timed(
        Command::new(toolwire)
            .args(["gc", "--json"])
            .current_dir(&ws),
    );
    let (find_all, find_all_rss) = timed(
        Command::new("find")
            .arg(ws.join(".toolwire/sessions"))
            .args(["-type", "f", "-printf", "%s\n"]),
    );
    println!(
        "  nothing expired:  toolwire gc {:>8.0} ms (peak RSS {} KiB)   find -type f -printf %s {:>8.0} ms (peak RSS {} KiB)   ratio {:.2}x",
        ms(scan),
        scan_rss,
        ms(find_all),
        find_all_rss,
        ratio(scan, find_all)
    );
    gc_row(
        "nothing expired",
        (scan, scan_rss),
        "find -type f -printf %s",
        (find_all, find_all_rss),
    );

    // Everything expired, next to `find -delete` of an identical store.
    let a = root.path().join("a");
    let b = root.path().join("b");
    for ws in [&a, &b] {
        std::fs::create_dir_all(ws).unwrap();
        make_store(&ws.join(".toolwire"), Duration::from_secs(86_400 * 40));
    }
    sync();
    let (remove, remove_rss) = timed(
        Command::new(toolwire)
            .args(["gc", "--json"])
            .current_dir(&a),
    );
    sync();
    let (find_delete, find_delete_rss) = timed(
        Command::new("find")
            .arg(b.join(".toolwire/sessions"))
            .arg("-delete"),
    );
    sync();
    assert_eq!(
        std::fs::read_dir(a.join(".toolwire/sessions"))
            .unwrap()
            .count(),
        0,
        "gc left something behind"
    );
    println!(
        "  all expired:      toolwire gc {:>8.0} ms (peak RSS {} KiB)   find -delete            {:>8.0} ms (peak RSS {} KiB)   ratio {:.2}x",
        ms(remove),
        remove_rss,
        ms(find_delete),
        find_delete_rss,
        ratio(remove, find_delete)
    );
    gc_row(
        "all expired",
        (remove, remove_rss),
        "find -delete",
        (find_delete, find_delete_rss),
    );
}

fn read() {
    const GIB: u64 = 1 << 30;
    const LINE: u64 = 64;
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let ws = root.path();
    let dir = ws.join(".toolwire/sessions/big/tool-results");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("toolu_big.txt");
    {
        let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        let lines_per_mib = (1 << 20) / LINE;
        let mut block = String::new();
        for k in 0..(GIB >> 20) {
            block.clear();
            for i in 0..lines_per_mib {
                block.push_str(&format!("{:<63}\n", format!("line {} of block {k}", i)));
            }
            file.write_all(block.as_bytes()).unwrap();
        }
        file.flush().unwrap();
    }
    sync();
    let total = GIB / LINE;
    let first = total / 2; // 0-based
    let (a, b) = (first + 1, first + 2000); // 1-based, inclusive
    println!("read: 2000 lines from line {a} of a 1 GiB artifact ({total} lines)");
    let toolwire = env!("CARGO_BIN_EXE_toolwire");
    // Warm the page cache the same way for both.
    let _ = timed(
        Command::new("cat")
            .arg(&path)
            .stdout(std::process::Stdio::null()),
    );
    let show = || {
        let start = Instant::now();
        let out = Command::new(toolwire)
            .args(["show", "big", "toolu_big", "--lines", &format!("{a}:{b}")])
            .current_dir(ws)
            .output()
            .expect("run toolwire show");
        let took = start.elapsed();
        assert!(out.status.success());
        assert_eq!(out.stdout.len(), 2000 * LINE as usize);
        took
    };
    let sed = || {
        timed(
            Command::new("sed")
                .arg("-n")
                .arg(format!("{a},{b}p;{b}q"))
                .arg(&path),
        )
        .0
    };
    // The first process indexes the artifact and keeps the index beside
    // it; every later one (each a fresh process) reads that index.
    let first_show = show();
    let index = toolwire::artifact::index::index_path(&path);
    let index_len = std::fs::metadata(&index).map_or(0, |m| m.len());
    let runs = 7;
    let (mut shows, mut seds) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        shows.push(show());
        seds.push(sed());
    }
    let (show, sed) = (median(shows), median(seds));
    println!(
        "  first process:    toolwire show {:>8.1} ms (one pass, then keeps a {} KiB index beside the output)",
        ms(first_show),
        index_len >> 10
    );
    println!(
        "  fresh process:    toolwire show {:>8.1} ms   sed -n A,Bp;Bq {:>8.1} ms   ratio {:.2}x   target <= 1.2x {} (median of {runs}, alternated)",
        ms(show),
        ms(sed),
        ratio(show, sed),
        if ratio(show, sed) <= 1.2 {
            "met"
        } else {
            "MISSED"
        }
    );
    let show_rss = children_maxrss();
    support::record(support::Row {
        bench: "saved_outputs",
        figure: "the same page, the first process after the artifact was written (indexes it, keeps the index)".into(),
        toolwire: format!("{:.1} ms ({} KiB index written)", ms(first_show), index_len >> 10),
        baseline: format!("{:.1} ms: `sed -n A,Bp;Bq`", ms(sed)),
        ratio: support::x(ratio(first_show, sed)),
        target: "report".into(),
        holds: None,
    });
    support::record(support::Row {
        bench: "saved_outputs",
        figure:
            "2000-line page from the middle of a 1 GiB artifact, fresh process (`toolwire show`)"
                .into(),
        toolwire: format!(
            "{:.1} ms (peak RSS {:.1} MB)",
            ms(show),
            show_rss as f64 / 1024.0
        ),
        baseline: format!("{:.1} ms: `sed -n A,Bp;Bq`", ms(sed)),
        ratio: support::x(ratio(show, sed)),
        target: "≤ 1.2×".into(),
        holds: Some(ratio(show, sed) <= 1.2),
    });
    // In process: the first read loads the index kept on disk, later ones
    // use it from memory.
    let data_dir = ws.join(".toolwire");
    let session = SessionId::try_from("big".to_owned()).unwrap();
    let request = ReadRequest {
        offset: first,
        limit: Some(2000),
        ..ReadRequest::default()
    };
    let read = |request: &ReadRequest| {
        read_artifact(
            &data_dir,
            None,
            &session,
            "toolu_big",
            request,
            SizeUnit::Chars,
        )
        .unwrap()
    };
    let start = Instant::now();
    let page = read(&request);
    let cold = start.elapsed();
    assert_eq!(page.end_line - page.start_line, 2000);
    let runs = 20;
    let start = Instant::now();
    for i in 0..runs {
        let request = ReadRequest {
            offset: first + i * 7919,
            limit: Some(2000),
            ..ReadRequest::default()
        };
        read(&request);
    }
    let warm = start.elapsed() / runs as u32;
    println!(
        "  in process:       first read {:>8.1} ms, then {:>6.2} ms a page   sed -n A,Bp;Bq {:>8.1} ms   ratio {:.4}x",
        ms(cold),
        ms(warm),
        ms(sed),
        ratio(warm, sed)
    );
    support::record(support::Row {
        bench: "saved_outputs",
        figure: "the same page in process after the first read (first read, then a page)".into(),
        toolwire: format!("{:.1} / {:.2} ms", ms(cold), ms(warm)),
        baseline: format!("{:.1} ms: `sed -n A,Bp;Bq`", ms(sed)),
        ratio: format!("{:.2} / {:.4}×", ratio(cold, sed), ratio(warm, sed)),
        target: "report".into(),
        holds: None,
    });
    // A grep over the whole gigabyte, next to grep -n.
    let request = ReadRequest {
        grep: Some("^line 0 of block 10(22|23) ".into()),
        ..ReadRequest::default()
    };
    let start = Instant::now();
    let found = read(&request);
    let grep_took = start.elapsed();
    assert_eq!(found.text.lines().count(), 2);
    let (grep, _) = timed(
        Command::new("grep")
            .args(["-n", "-E", "^line 0 of block 10(22|23) "])
            .arg(&path),
    );
    println!(
        "  grep, whole file: artifact/read {:>8.1} ms   grep -n -E {:>8.1} ms   ratio {:.2}x",
        ms(grep_took),
        ms(grep),
        ratio(grep_took, grep)
    );
    support::record(support::Row {
        bench: "saved_outputs",
        figure: "grep over the whole 1 GiB artifact (`artifact/read`)".into(),
        toolwire: format!("{:.1} ms", ms(grep_took)),
        baseline: format!("{:.1} ms: `grep -n -E`", ms(grep)),
        ratio: support::x(ratio(grep_took, grep)),
        target: "report".into(),
        holds: None,
    });
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Record a `toolwire gc` figure: its time and peak RSS (KiB) next to
/// `find`'s on an identical store, held to issue 39's bound on its peak
/// resident memory.
fn gc_row(
    case: &str,
    (took, rss_kib): (Duration, i64),
    find: &str,
    (find_took, find_kib): (Duration, i64),
) {
    let mb = rss_kib as f64 / 1024.0;
    let find_mb = find_kib as f64 / 1024.0;
    support::record(support::Row {
        bench: "saved_outputs",
        figure: format!(
            "`toolwire gc`, {SESSIONS} sessions / {} artifacts, {case}",
            SESSIONS * PER_SESSION
        ),
        toolwire: format!("{:.0} ms (peak RSS {mb:.1} MB)", ms(took)),
        baseline: format!(
            "{:.0} ms (peak RSS {find_mb:.1} MB): `{find}`",
            ms(find_took)
        ),
        ratio: support::x(ratio(took, find_took)),
        target: "peak RSS < 16 MB".into(),
        holds: Some(mb < 16.0),
    });
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

/// Saved outputs on object storage next to the local store, same run: a
/// real S3 server (moto, as the tests start it) on loopback.
fn objects() {
    use toolwire::artifact::objects::ObjectArtifacts;
    use toolwire::artifact::{ArtifactStore, FsArtifactStore};
    let s3 = s3::S3Server::start();
    s3.create_bucket("bench");
    let config: toolwire::artifact::objects::ObjectsConfig =
        serde_json::from_value(s3.objects_config("bench", "b")).unwrap();
    let store = ObjectArtifacts::open(&config).unwrap();
    let ws = tempfile::tempdir().unwrap();
    let data_dir = ws.path().join(".toolwire");

    // Writes: 1 MB text artifacts, create-only PUT (with its line index)
    // next to the local write (temporary file, fsync, no-clobber rename).
    let body: String = (0..20_000)
        .map(|i| format!("line {i:06} of a build log, padded out a bit\n"))
        .collect();
    let n = 20;
    let local_dir = toolwire::artifact::session_dir(&data_dir, "w");
    let start = Instant::now();
    for i in 0..n {
        FsArtifactStore
            .write_once(
                &local_dir.join(format!("toolu_{i}.txt")),
                body.as_bytes(),
                true,
            )
            .unwrap();
    }
    let local_write = start.elapsed() / n;
    let start = Instant::now();
    for i in 0..n {
        let url = format!("{}/toolu_{i}.txt", store.session_url("w"));
        store
            .write_once(Path::new(&url), body.as_bytes(), true)
            .unwrap();
    }
    let object_write = start.elapsed() / n;
    println!(
        "objects: write a 1 MB artifact   object store {:>8.2} ms   local (fsync) {:>8.2} ms   ratio {:.1}x",
        ms(object_write),
        ms(local_write),
        ratio(object_write, local_write)
    );
    support::record(support::Row {
        bench: "saved_outputs",
        figure: "object store (moto): a 1 MB artifact written create-only".into(),
        toolwire: format!("{:.2} ms", ms(object_write)),
        baseline: format!("{:.2} ms: the local store's fsync write", ms(local_write)),
        ratio: support::x(ratio(object_write, local_write)),
        target: "report".into(),
        holds: None,
    });

    // A page of 2000 lines from the middle of a 64 MB artifact.
    let lines = 1_400_000u64;
    let mut big = String::with_capacity(64 << 20);
    for i in 0..lines {
        big.push_str(&format!("line {i:07} of a very long build log, padded\n"));
    }
    let session = SessionId::try_from("r".to_owned()).unwrap();
    FsArtifactStore
        .write_once(
            &toolwire::artifact::session_dir(&data_dir, "r").join("toolu_big.txt"),
            big.as_bytes(),
            false,
        )
        .unwrap();
    let url = format!("{}/toolu_big.txt", store.session_url("r"));
    store
        .write_once(Path::new(&url), big.as_bytes(), false)
        .unwrap();
    let runs = 20u64;
    let page = |objects: Option<&toolwire::artifact::objects::ObjectsConfig>, i: u64| {
        let request = ReadRequest {
            offset: lines / 2 + i * 7919,
            limit: Some(2000),
            ..ReadRequest::default()
        };
        let page = read_artifact(
            &data_dir,
            objects,
            &session,
            "toolu_big",
            &request,
            SizeUnit::Chars,
        )
        .unwrap();
        assert_eq!(page.end_line - page.start_line, 2000);
        assert_eq!(page.total_lines, lines);
    };
    // The local store's first read indexes the file; later ones use it.
    page(None, 0);
    let start = Instant::now();
    for i in 0..runs {
        page(None, i);
    }
    let local_read = start.elapsed() / runs as u32;
    let start = Instant::now();
    for i in 0..runs {
        page(Some(&config), i);
    }
    let object_read = start.elapsed() / runs as u32;
    // What a reader without ranges would pay: the whole object.
    let key = store.key("r", "toolu_big.txt");
    let start = Instant::now();
    for _ in 0..3 {
        assert_eq!(store.get(&key).unwrap().unwrap().len(), big.len());
    }
    let whole = start.elapsed() / 3;
    println!(
        "objects: 2000 lines of a 64 MB artifact   object store {:>8.2} ms   local {:>8.2} ms   ratio {:.1}x",
        ms(object_read),
        ms(local_read),
        ratio(object_read, local_read)
    );
    println!(
        "objects: the same page against a GET of the whole 64 MB object {:>8.2} ms   ratio {:.3}x",
        ms(whole),
        ratio(object_read, whole)
    );
    support::record(support::Row {
        bench: "saved_outputs",
        figure: "object store (moto): a 2000-line page of a 64 MB artifact by ranged reads".into(),
        toolwire: format!("{:.2} ms", ms(object_read)),
        baseline: format!(
            "{:.2} ms: the local store's page; {:.2} ms: `GET` of the whole object",
            ms(local_read),
            ms(whole)
        ),
        ratio: format!(
            "{} local, {} whole",
            support::x(ratio(object_read, local_read)),
            support::x(ratio(object_read, whole))
        ),
        target: "report".into(),
        holds: None,
    });
}
