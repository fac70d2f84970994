//! A small JSON-RPC client that speaks toolwire's framing, used by every
//! end-to-end test: over an in-memory duplex to an in-process server, or
//! over the pipes of the real binary.
#![allow(dead_code)]

pub mod pg;

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, LazyLock};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::{FramedRead, FramedWrite};

use toolwire::server::{self, ConnectionEnd, Server};
use toolwire::session::Storage;
use toolwire::transport::codec::{Frame, LspCodec};

pub struct Client<R, W> {
    reader: FramedRead<R, LspCodec>,
    /// `None` once the input was closed with [`Client::close_input`].
    writer: Option<FramedWrite<W, LspCodec>>,
    next_id: i64,
    /// Messages read while waiting for something else.
    stash: VecDeque<Value>,
    pub notifications: Vec<Value>,
    /// Method and params of each request still unanswered, for validation.
    sent: HashMap<i64, (String, Value)>,
}

/// Every checked-in schema, compiled once.
static SCHEMAS: LazyLock<HashMap<String, jsonschema::Validator>> = LazyLock::new(|| {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema");
    std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json") && !p.ends_with("openrpc.json"))
        .map(|p| {
            let schema: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let validator =
                jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, validator)
        })
        .collect()
});

/// Fail the test when `instance` does not match the checked-in schema
/// `file`: a schema that lies about the traffic fails the build.
pub fn validate(file: &str, instance: &Value) {
    let Some(validator) = SCHEMAS.get(file) else {
        return;
    };
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    if !errors.is_empty() {
        let shown = serde_json::to_string(instance).unwrap();
        let shown = if shown.len() > 2000 {
            format!("{}...", &shown[..2000])
        } else {
            shown
        };
        panic!("traffic does not match schema/{file}: {errors:?}\ninstance: {shown}");
    }
}

/// Check one exchange against the schemas: accepted params and results by
/// method, and every error's `data`.
fn validate_exchange(method: &str, params: &Value, response: &Value) {
    let stem = method.replace('/', ".");
    if let Some(error) = response.get("error") {
        validate("error-data.json", &error["data"]);
    } else {
        validate(&format!("{stem}.params.json"), params);
        validate(&format!("{stem}.result.json"), &response["result"]);
    }
}

pub type MemClient = Client<
    tokio::io::ReadHalf<tokio::io::DuplexStream>,
    tokio::io::WriteHalf<tokio::io::DuplexStream>,
>;

/// Connect a new in-memory client to `server`.
pub fn connect(server: Arc<Server>) -> (MemClient, tokio::task::JoinHandle<ConnectionEnd>) {
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let (their_read, their_write) = tokio::io::split(theirs);
    let task = tokio::spawn(server::serve_connection(server, their_read, their_write));
    let (r, w) = tokio::io::split(ours);
    (Client::new(r, w), task)
}

pub fn new_server() -> Arc<Server> {
    Server::new(test_storage())
}

/// Whether this test run keeps transcripts as files. A test that reads
/// transcript files or restarts a server on the same files checks the
/// local backend only; on the shared store the same guarantees are checked
/// by tests/fleet.rs.
pub fn local_transcripts(test: &str) -> bool {
    local_only(
        test,
        "reads transcript files, which the postgres backend has not",
    )
}

/// Whether this test run is on the local backend; on the shared-store
/// matrix (`TOOLWIRE_TEST_BACKEND=postgres`) the test says why it does not
/// apply there (`reason`) and returns early.
pub fn local_only(test: &str, reason: &str) -> bool {
    let local = !pg::matrix_on_postgres();
    if !local {
        eprintln!("{test}: {reason}; checked on the local backend");
    }
    local
}

/// The storage the test matrix runs on: transcript files, or with
/// `TOOLWIRE_TEST_BACKEND=postgres` a fresh migrated database of a real
/// PostgreSQL server (see `pg`).
pub fn test_storage() -> Storage {
    if pg::matrix_on_postgres() {
        let (_, store) = pg::migrated_database();
        Storage {
            shared: Some(Arc::new(store)),
            ..Storage::default()
        }
    } else {
        Storage::default()
    }
}

pub fn file_uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

impl<R, W> Client<R, W>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    pub fn new(reader: R, writer: W) -> Self {
        Client {
            reader: FramedRead::new(reader, LspCodec::default()),
            writer: Some(FramedWrite::new(writer, LspCodec::default())),
            next_id: 1,
            stash: VecDeque::new(),
            notifications: Vec::new(),
            sent: HashMap::new(),
        }
    }

    pub async fn send(&mut self, value: &Value) {
        let body = serde_json::to_vec(value).unwrap();
        self.writer_mut().send(Bytes::from(body)).await.unwrap();
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        let inner = self.writer_mut().get_mut();
        inner.write_all(bytes).await.unwrap();
        inner.flush().await.unwrap();
    }

    /// Send a request without waiting; returns its id.
    pub async fn start(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        self.sent.insert(id, (method.to_owned(), params));
        id
    }

    pub async fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    /// Read the next message from the server (`None` at end of stream).
    pub async fn read(&mut self) -> Option<Value> {
        if let Some(v) = self.stash.pop_front() {
            return Some(v);
        }
        self.read_wire().await
    }

    async fn read_wire(&mut self) -> Option<Value> {
        loop {
            match self.reader.next().await? {
                Ok(Frame::Body(body)) => {
                    let value: Value = toolwire::json::from_slice(&body).unwrap();
                    if value.get("method").is_some() && value.get("id").is_none() {
                        self.notifications.push(value);
                        continue;
                    }
                    return Some(value);
                }
                other => panic!("server sent a bad frame: {other:?}"),
            }
        }
    }

    /// Wait for the response to `id`, keeping other messages for later.
    pub async fn response(&mut self, id: i64) -> Value {
        let msg = self.response_unchecked(id).await;
        if let Some((method, params)) = self.sent.remove(&id) {
            validate_exchange(&method, &params, &msg);
        }
        msg
    }

    async fn response_unchecked(&mut self, id: i64) -> Value {
        if let Some(pos) = self.stash.iter().position(|m| m["id"] == json!(id)) {
            return self.stash.remove(pos).unwrap();
        }
        loop {
            let msg = self
                .read_wire()
                .await
                .expect("server closed before answering");
            if msg["id"] == json!(id) {
                return msg;
            }
            self.stash.push_back(msg);
        }
    }

    /// Call and return `Ok(result)` or `Err(error object)`.
    pub async fn request(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.start(method, params).await;
        let msg = self.response(id).await;
        match msg.get("error") {
            Some(err) => Err(err.clone()),
            None => Ok(msg["result"].clone()),
        }
    }

    /// Call, expecting success.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        match self.request(method, params.clone()).await {
            Ok(v) => v,
            Err(e) => panic!("{method} failed: {e}\nparams: {params}"),
        }
    }

    /// Call, expecting an error with `code`; returns the error object.
    pub async fn fails(&mut self, method: &str, params: Value, code: i64) -> Value {
        match self.request(method, params).await {
            Ok(v) => panic!("{method} succeeded, expected {code}: {v}"),
            Err(e) => {
                assert_eq!(e["code"], json!(code), "{e}");
                assert!(
                    e["data"]["kind"].is_string(),
                    "error without data.kind: {e}"
                );
                e
            }
        }
    }

    pub async fn initialize(&mut self, root: &Path, options: Value) -> Value {
        let result = self
            .call(
                "initialize",
                json!({"processId": null, "rootUri": file_uri(root), "initializationOptions": options}),
            )
            .await;
        self.notify("initialized", json!({})).await;
        result
    }

    pub async fn close(mut self) {
        self.close_input().await;
    }

    /// End the server's input (EOF) and keep reading what it sends.
    pub async fn close_input(&mut self) {
        if let Some(mut writer) = self.writer.take() {
            let _ = writer.get_mut().shutdown().await;
        }
    }

    fn writer_mut(&mut self) -> &mut FramedWrite<W, LspCodec> {
        self.writer.as_mut().expect("the input was closed")
    }
}

// ------------------------------------------------------------- messages --

pub fn user_text(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

pub fn assistant_calls(ids: &[&str]) -> Value {
    let blocks: Vec<Value> = ids
        .iter()
        .map(|id| json!({"type": "tool_use", "id": id, "name": "Bash", "input": {"command": "ls"}}))
        .collect();
    json!({"role": "assistant", "content": blocks})
}

pub fn assistant_tool(id: &str, name: &str) -> Value {
    json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": name, "input": {}}]})
}

pub fn results(items: &[(&str, &str)]) -> Value {
    let blocks: Vec<Value> = items
        .iter()
        .map(|(id, text)| json!({"type": "tool_result", "tool_use_id": id, "content": text}))
        .collect();
    json!({"role": "user", "content": blocks})
}

/// Lines of a transcript file as JSON values (panics on a bad line); a
/// fork's transcript read through its parent's bytes, as toolwire reads it.
pub fn transcript_lines(path: &Path) -> Vec<Value> {
    match toolwire::transcript::fork::read_all(path).map(String::from_utf8) {
        Ok(Ok(text)) => text
            .lines()
            .map(|l| {
                toolwire::json::from_slice(l.as_bytes())
                    .unwrap_or_else(|e| panic!("bad line {l:?}: {e}"))
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The message lines only.
pub fn transcript_messages(path: &Path) -> Vec<Value> {
    transcript_lines(path)
        .into_iter()
        .filter(|l| l["type"] == "message")
        .map(|l| l["message"].clone())
        .collect()
}

/// Assert the pair invariant: each tool_use answered in the next user
/// message(s) before anything else, and no result without its call.
pub fn assert_paired(messages: &[Value]) {
    let mut open: Vec<String> = Vec::new();
    let mut called: std::collections::HashSet<String> = Default::default();
    for m in messages {
        let blocks = m["content"].as_array().cloned().unwrap_or_default();
        if m["role"] == "assistant" {
            assert!(open.is_empty(), "calls {open:?} left unanswered before {m}");
            for b in &blocks {
                if b["type"] == "tool_use" {
                    let id = b["id"].as_str().unwrap().to_owned();
                    called.insert(id.clone());
                    open.push(id);
                }
            }
        } else {
            for b in &blocks {
                if b["type"] == "tool_result" {
                    let id = b["tool_use_id"].as_str().unwrap();
                    assert!(called.contains(id), "orphan result {id}");
                    let pos = open.iter().position(|o| o == id);
                    assert!(pos.is_some(), "result {id} answers nothing open");
                    open.remove(pos.unwrap());
                }
            }
            if !blocks.iter().any(|b| b["type"] == "tool_result") {
                assert!(open.is_empty(), "calls {open:?} interrupted by {m}");
            }
        }
    }
    assert!(open.is_empty(), "transcript ends with open calls {open:?}");
}

// -------------------------------------------------------------- process --

pub type ProcClient = Client<tokio::process::ChildStdout, tokio::process::ChildStdin>;

/// Start the real `toolwire serve` with `cwd` as its working directory.
pub fn spawn_binary(cwd: &Path) -> (ProcClient, tokio::process::Child) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .arg("serve")
        .current_dir(cwd)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn toolwire");
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    (Client::new(stdout, stdin), child)
}

/// Start `toolwire serve --shared` for `workspace`, with its daemon's
/// runtime directory under `run` (isolated from the user's real one).
pub fn spawn_shared(
    workspace: &Path,
    run: &Path,
    idle_secs: u64,
) -> (ProcClient, tokio::process::Child) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args([
            "serve",
            "--shared",
            "--idle-timeout",
            &idle_secs.to_string(),
        ])
        .current_dir(workspace)
        .env("XDG_RUNTIME_DIR", run)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn toolwire serve --shared");
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    (Client::new(stdout, stdin), child)
}

/// The commit logs (`<dataDir>/wal/*.wal`) that processes left in `data`:
/// a process that stopped cleanly leaves none.
pub fn commit_logs(data: &Path) -> Vec<String> {
    match std::fs::read_dir(data.join("wal")) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".wal"))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// The body of the next LSP frame on a blocking reader (the pipe of a
/// `toolwire serve` child); panics when the stream ends first.
pub fn read_frame_blocking(reader: &mut impl std::io::BufRead) -> Vec<u8> {
    let mut length = 0;
    loop {
        let mut line = String::new();
        assert_ne!(reader.read_line(&mut line).unwrap(), 0, "the stream ended");
        if line == "\r\n" {
            break;
        }
        if let Some(n) = line.strip_prefix("Content-Length: ") {
            length = n.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    body
}

/// Run `cmd` to its end, asserting it succeeded; its standard output.
pub fn output_ok(cmd: &mut std::process::Command) -> Vec<u8> {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The tool_result contents the provider received in one request, by id.
pub fn results_sent(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .map(|b| {
            (
                b["tool_use_id"].as_str().unwrap().to_owned(),
                b["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}
