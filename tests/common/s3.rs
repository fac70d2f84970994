//! A real S3-compatible server for the tests: moto's server mode (PyPI,
//! pinned in tests/objects/requirements.txt, installed by
//! tests/setup.d/50-objects.sh), started on a free loopback port in a
//! temporary directory and killed when dropped. Include it with
//! `#[path = "common/s3.rs"] mod s3;`.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long the server may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(60);

pub const INSTALL: &str = "./tests/setup.sh (or bash tests/setup.d/50-objects.sh)";

fn python() -> PathBuf {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/objects/.venv/bin/python");
    assert!(
        python.exists(),
        "the S3 test server (moto) is not installed: run {INSTALL}"
    );
    python
}

pub struct S3Server {
    child: Option<Child>,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl S3Server {
    /// Start a server and wait until it answers.
    pub fn start() -> S3Server {
        let python = python();
        let dir = tempfile::tempdir().unwrap();
        // Port 0: the server binds a port of its own and logs it, so no
        // other process can take it between our choosing and its binding.
        let log_path = dir.path().join("moto.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let child = Command::new(python)
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", "0"])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start moto ({err}); install it: {INSTALL}"));
        let mut server = S3Server {
            child: Some(child),
            port: 0,
            _dir: dir,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let said = std::fs::read_to_string(&log_path).unwrap_or_default();
            let port = said
                .split("Running on http://127.0.0.1:")
                .nth(1)
                .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|digits| digits.parse::<u16>().ok());
            if let Some(port) = port
                && TcpStream::connect(("127.0.0.1", port)).is_ok()
            {
                server.port = port;
                break;
            }
            if let Some(Ok(Some(status))) = server.child.as_mut().map(|c| c.try_wait()) {
                panic!("moto exited ({status}) before listening: {said}");
            }
            assert!(
                Instant::now() < deadline,
                "moto did not listen within {START_TIMEOUT:?}: {said}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Create a bucket (moto checks no signature; a bare request does).
    pub fn create_bucket(&self, bucket: &str) {
        let status = self.raw("PUT", &format!("/{bucket}"));
        assert_eq!(status, 200, "creating bucket {bucket}");
    }

    /// Send a bodyless request; its status code.
    pub fn raw(&self, method: &str, path: &str) -> u16 {
        self.request(method, path).0
    }

    /// The keys under `prefix` in `bucket`, sorted.
    pub fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let (status, body) = self.request("GET", &format!("/{bucket}?list-type=2&prefix={prefix}"));
        assert_eq!(status, 200, "{body}");
        let mut keys: Vec<String> = body
            .split("<Key>")
            .skip(1)
            .filter_map(|rest| rest.split("</Key>").next())
            .map(str::to_owned)
            .collect();
        keys.sort();
        keys
    }

    /// Send a bodyless request; its status code and body.
    pub fn request(&self, method: &str, path: &str) -> (u16, String) {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        )
        .unwrap();
        let mut reply = Vec::new();
        let _ = stream.read_to_end(&mut reply);
        let reply = String::from_utf8_lossy(&reply).into_owned();
        let status = reply
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no HTTP reply: {reply:?}"));
        let body = reply
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_owned())
            .unwrap_or_default();
        (status, body)
    }

    /// Remove an object, as another client of the bucket would (boto3).
    pub fn delete(&self, bucket: &str, key: &str) {
        self.boto3(&format!("delete_object(Bucket={bucket:?}, Key={key:?})"));
    }

    /// Write an object, as another client of the bucket would (boto3).
    pub fn put(&self, bucket: &str, key: &str, body: &str) {
        self.boto3(&format!(
            "put_object(Bucket={bucket:?}, Key={key:?}, Body={body:?})"
        ));
    }

    /// Run one call of a boto3 S3 client of this server.
    fn boto3(&self, call: &str) {
        let script = format!(
            "import sys, boto3; boto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1', aws_access_key_id='test', aws_secret_access_key='test').{call}"
        );
        let status = Command::new(python())
            .args(["-c", &script, &self.endpoint()])
            .status()
            .unwrap();
        assert!(status.success(), "boto3: {call}");
    }

    /// The `storage.objects` configuration for `s3://bucket/prefix` here.
    pub fn objects_config(&self, bucket: &str, prefix: &str) -> Value {
        json!({
            "url": format!("s3://{bucket}/{prefix}"),
            "options": {
                "endpoint": self.endpoint(),
                "region": "us-east-1",
                "allow_http": true,
                "access_key_id": "test",
                "secret_access_key": "test",
            }
        })
    }

    /// Stop the server now (a store that stops answering).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The shared store of a fleet test: a bucket on a fresh S3 server for
/// saved outputs (under `prefix`), a fresh migrated database, and a data
/// directory.
pub struct SharedFixture {
    pub s3: S3Server,
    /// The `storage.objects` configuration of the bucket.
    pub objects: Value,
    pub db: String,
    pub store: toolwire::store::postgres::Postgres,
    pub data_dir: PathBuf,
    _data: tempfile::TempDir,
}

impl SharedFixture {
    /// With `database`, a migrated database's URL and store
    /// (`common::pg::migrated_database()`).
    pub fn start(
        bucket: &str,
        prefix: &str,
        database: (String, toolwire::store::postgres::Postgres),
    ) -> SharedFixture {
        let s3 = S3Server::start();
        s3.create_bucket(bucket);
        let objects = s3.objects_config(bucket, prefix);
        let (db, store) = database;
        let data = tempfile::tempdir().unwrap();
        SharedFixture {
            s3,
            objects,
            db,
            store,
            data_dir: data.path().canonicalize().unwrap(),
            _data: data,
        }
    }
}
