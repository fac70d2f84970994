//! A real PostgreSQL server for the tests of the shared store: Debian's
//! `postgresql` package (`.ci/apt/postgres.txt`), one throwaway cluster per
//! test process in a temporary directory, reached over a unix socket in that
//! directory only (no TCP port), fsync off. Each test gets a database of its
//! own, migrated by toolwire's own `migrate`. The cluster is stopped and its
//! directory removed when the process exits.
//!
//! initdb refuses to run as root, so under root the cluster runs as
//! `nobody` (through `setpriv`), in a directory it owns.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub const INSTALL: &str = "apt-get install -y postgresql";

struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    postgres: Child,
}

static CLUSTER: Mutex<Option<Cluster>> = Mutex::new(None);
static NEXT_DB: AtomicU32 = AtomicU32::new(0);

/// The newest installed server's bin directory.
fn server_bin() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    match versions.pop() {
        Some((_, bin)) => bin,
        None => panic!(
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): run `{INSTALL}`"
        ),
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Run a server program as the cluster's owner.
fn as_owner(program: &Path) -> Command {
    if is_root() {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

extern "C" fn stop_at_exit() {
    let cluster = CLUSTER.lock().ok().and_then(|mut c| c.take());
    if let Some(mut cluster) = cluster {
        // SIGINT: PostgreSQL's fast shutdown.
        // SAFETY: signalling our own child.
        unsafe { libc::kill(cluster.postgres.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while cluster.postgres.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = cluster.postgres.kill();
        let _ = cluster.postgres.wait();
        let _ = std::fs::remove_dir_all(&cluster.dir);
    }
}

/// Where the cluster lives: the temporary directory, unless it is root's
/// and closed to others (then /var/tmp, which `nobody` can reach).
fn base_dir() -> PathBuf {
    let tmp = std::env::temp_dir();
    if !is_root() {
        return tmp;
    }
    use std::os::unix::fs::PermissionsExt;
    let open = tmp
        .ancestors()
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0));
    if open { tmp } else { PathBuf::from("/var/tmp") }
}

fn start() -> Cluster {
    let bin = server_bin();
    let dir = tempfile::Builder::new()
        .prefix("twpg-")
        .tempdir_in(base_dir())
        .expect("temporary directory for PostgreSQL")
        .keep();
    if is_root() {
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).expect("chown the cluster dir");
    }
    let data = dir.join("data");
    let out = as_owner(&bin.join("initdb"))
        .arg("-D")
        .arg(&data)
        .args([
            "-U",
            "toolwire",
            "--auth=trust",
            "--no-locale",
            "-E",
            "UTF8",
            "-N",
        ])
        .output()
        .expect("run initdb");
    assert!(
        out.status.success(),
        "initdb failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::File::create(dir.join("log")).expect("postgres log");
    if is_root() {
        std::os::unix::fs::chown(dir.join("log"), Some(65534), Some(65534)).ok();
    }
    let postgres = spawn_server(&bin, &dir);
    let cluster = Cluster { dir, bin, postgres };
    wait_ready(&cluster);
    cluster
}

/// The server of the cluster in `dir`, logging to its `log`.
fn spawn_server(bin: &Path, dir: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("log"))
        .expect("postgres log");
    as_owner(&bin.join("postgres"))
        .arg("-D")
        .arg(dir.join("data"))
        .arg("-k")
        .arg(dir)
        .args(["-c", "listen_addresses=", "-c", "max_connections=200", "-F"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start postgres")
}

fn wait_ready(cluster: &Cluster) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = Command::new(cluster.bin.join("pg_isready"))
            .arg("-h")
            .arg(&cluster.dir)
            .args(["-U", "toolwire", "-d", "postgres", "-q"])
            .status()
            .is_ok_and(|s| s.success());
        if ready {
            break;
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(cluster.dir.join("log")).unwrap_or_default();
            panic!("PostgreSQL did not start within 30 s:\n{log}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stop the server (fast shutdown), keeping the cluster's files for
/// [`start_server_again`]. Only for a test binary of its own.
pub fn stop_server() {
    let mut guard = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    let cluster = guard.as_mut().expect("no cluster to stop");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(cluster.postgres.id() as i32, libc::SIGINT) };
    let _ = cluster.postgres.wait();
}

/// Start the server [`stop_server`] stopped, on the same files and socket.
pub fn start_server_again() {
    let mut guard = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    let cluster = guard.as_mut().expect("no cluster to start");
    cluster.postgres = spawn_server(&cluster.bin, &cluster.dir);
    wait_ready(cluster);
}

/// The connection URL of a new, empty database (not yet migrated).
pub fn fresh_database() -> String {
    let mut guard = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    if guard.is_none() {
        *guard = Some(start());
        // SAFETY: registering a plain function to run at exit.
        unsafe { libc::atexit(stop_at_exit) };
    }
    let cluster = guard.as_ref().unwrap();
    let name = format!(
        "t{}_{}",
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::Relaxed)
    );
    let out = Command::new(cluster.bin.join("psql"))
        .arg("-h")
        .arg(&cluster.dir)
        .args(["-U", "toolwire", "-d", "postgres", "-q", "-c"])
        .arg(format!("CREATE DATABASE {name}"))
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "CREATE DATABASE failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    format!("host={} user=toolwire dbname={name}", cluster.dir.display())
}

/// A migrated database's URL and its store.
pub fn migrated_database() -> (String, toolwire::store::postgres::Postgres) {
    let url = fresh_database();
    let store = toolwire::store::postgres::Postgres::connect(&url, 8).unwrap();
    let url2 = url.clone();
    // Its own runtime on its own thread: callers may be inside one.
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let pg = toolwire::store::postgres::Postgres::connect(&url2, 1).unwrap();
        rt.block_on(pg.migrate()).unwrap();
    })
    .join()
    .unwrap();
    (url, store)
}

/// Whether the test matrix runs on PostgreSQL (`TOOLWIRE_TEST_BACKEND=postgres`).
pub fn matrix_on_postgres() -> bool {
    std::env::var("TOOLWIRE_TEST_BACKEND").is_ok_and(|v| v == "postgres")
}

/// A plain connection to the test's database, for what only SQL can do:
/// backdate a session, hold a table lock, read the lock table.
pub async fn sql(db: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(db, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// Wait until the locks of this database that `filter` (a condition on
/// `pg_locks`) selects exist, or, with `none`, until there are none; a
/// bounded wait on a state, never a timing.
pub async fn wait_for_locks(sql: &tokio_postgres::Client, filter: &str, none: bool) {
    let query = format!(
        "SELECT count(*) FROM pg_locks WHERE database = \
         (SELECT oid FROM pg_database WHERE datname = current_database()) AND {filter}"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let n: i64 = sql.query_one(&query, &[]).await.unwrap().get(0);
        if (n == 0) == none {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "pg_locks never showed {filter} (none: {none})"
        );
        tokio::task::yield_now().await;
    }
}

/// Locks of advisory keys someone waits for (an apply waiting for gc).
pub const WAITING_ADVISORY: &str = "locktype = 'advisory' AND NOT granted";
/// Locks of tables someone waits for (gc waiting at its row deletion).
pub const WAITING_TABLE: &str = "locktype = 'relation' AND NOT granted";
/// Any advisory lock held (a replica holding a session loaded).
pub const HELD_ADVISORY: &str = "locktype = 'advisory' AND granted";

/// Have `server` let go of every session it holds loaded (as a replica
/// does with idle sessions), and wait until the database at `db` shows no
/// session held loaded by anyone.
pub async fn unload(server: &toolwire::server::Server, db: &str) {
    server.registry.close_all().await;
    wait_for_locks(&sql(db).await, HELD_ADVISORY, true).await;
}

/// Stop this process's cluster now (fast shutdown), as a database that
/// goes away under running replicas. Only for a test binary of its own:
/// every database of the process goes with it.
pub fn stop_cluster() {
    stop_at_exit();
}
