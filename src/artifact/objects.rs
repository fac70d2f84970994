//! Saved outputs on object storage (`[storage.objects]`): S3, GCS, Azure, or
//! a directory, through the `object_store` crate.
//!
//! An artifact is the object `<prefix>/sessions/<sessionId>/tool-results/<name>`
//! (the names of [`super::file_name`]); previews name it by URL,
//! `<url>/sessions/<sessionId>/tool-results/<name>`, and `artifact/read`, the
//! MCP link and gc find it from the session and the id, as on disk.
//!
//! - **Create-only.** An artifact is written with `PutMode::Create` (on S3 a
//!   `PUT` with `If-None-Match: *`): of two replicas persisting one result,
//!   the second gets "already exists", reads the object back and reuses it
//!   when it holds the same bytes (anything else is refused, as on disk). A
//!   `PUT` answered 200 is durable, so a decision journaled after it never
//!   points at nothing.
//! - **A line index beside each text artifact**, `<name>.idx` (JSON: total
//!   lines, size in every unit, a line start every 64 KiB), written
//!   create-only before the artifact from the bytes in hand. `artifact/read`
//!   fetches it, then only the ranges a page needs (ranged `GET`s from the
//!   checkpoint before the page). Without it (written by something else), one
//!   streaming pass over ranged reads builds the index, kept per process.
//! - **Unreachable is not a verdict.** A store that does not answer fails the
//!   request (`storage`, -32014) before anything is decided: the result is
//!   decided on a later try, when it can be saved, instead of being frozen
//!   as "sent whole" across the fleet by one outage.
//!
//! The crate's calls are async; toolwire's artifact code runs on blocking
//! threads, so they run on a small runtime of their own and the caller
//! waits for them.

use std::collections::HashMap;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path as FsPath;
use std::sync::{Arc, LazyLock, Mutex};

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path;
use object_store::{
    ObjectMeta, ObjectStore, ObjectStoreExt, ObjectStoreScheme, PutMode, PutOptions, PutPayload,
};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::index::LineIndex;
use super::{ArtifactStore, Written};
use crate::error::{Error, Result};

/// `[storage.objects]`: the bucket saved outputs go to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectsConfig {
    /// The bucket and prefix: `s3://bucket/prefix`, `gs://bucket/prefix`,
    /// `az://container/prefix` or `file:///absolute/dir`. Saved outputs are
    /// `<url>/sessions/<sessionId>/tool-results/<name>`.
    pub url: String,
    /// The `object_store` options of the URL's service, by their names
    /// there (`endpoint`, `region`, `allow_http`, `access_key_id`, ...; in
    /// snake_case or camelCase). Unset ones come from the environment
    /// (`AWS_*`, `GOOGLE_*`, `AZURE_*`), as the services' own tools read it.
    #[serde(default)]
    pub options: std::collections::BTreeMap<String, OptionValue>,
}

/// An option's value: TOML and JSON may spell `true` or `9000` bare.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum OptionValue {
    Text(String),
    Flag(bool),
    Number(u64),
}

impl std::fmt::Display for OptionValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OptionValue::Text(s) => f.write_str(s),
            OptionValue::Flag(b) => write!(f, "{b}"),
            OptionValue::Number(n) => write!(f, "{n}"),
        }
    }
}

/// Suffix of a text artifact's line index, here and beside local
/// artifacts alike.
pub use super::index::INDEX_SUFFIX;

/// First ranged read; sequential reads double it up to [`MAX_CHUNK`].
const FIRST_CHUNK: u64 = 256 << 10;
const MAX_CHUNK: u64 = 8 << 20;

/// One runtime for every object-store call of the process.
static RUNTIME: LazyLock<io::Result<tokio::runtime::Runtime>> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("toolwire-objects")
        .enable_all()
        .build()
});

/// Opened stores by configuration: one HTTP client (and connection pool)
/// per bucket for the life of the process.
static OPEN: LazyLock<Mutex<HashMap<ObjectsConfig, Arc<ObjectArtifacts>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Run `fut` to completion from a thread that is not running async code.
fn wait<T>(fut: impl Future<Output = T> + Send) -> io::Result<T>
where
    T: Send,
{
    match &*RUNTIME {
        Ok(rt) => Ok(rt.block_on(fut)),
        Err(err) => Err(io::Error::other(format!(
            "cannot start the object-store runtime: {err}"
        ))),
    }
}

/// The store could not be reached or refused the request for a reason
/// other than the object's content: the request fails whole.
#[derive(Debug, thiserror::Error)]
#[error("object store: {0}")]
pub struct Unavailable(pub String);

/// Whether `err` (from [`ArtifactStore::write_once`]) means the store was
/// unavailable rather than that this artifact could not be written.
pub fn is_unavailable(err: &io::Error) -> bool {
    err.get_ref()
        .is_some_and(|inner| inner.downcast_ref::<Unavailable>().is_some())
}

fn unavailable(err: object_store::Error) -> io::Error {
    io::Error::other(Unavailable(err.to_string()))
}

/// A bucket (and prefix) holding saved outputs.
#[derive(Debug)]
pub struct ObjectArtifacts {
    store: Arc<dyn ObjectStore>,
    /// The configured URL without a trailing `/`.
    url: String,
    prefix: Path,
}

impl ObjectArtifacts {
    /// The store for `config`, opened once per process. Checks the URL and
    /// every option (an unknown option is an error naming it); makes no
    /// request.
    pub fn open(config: &ObjectsConfig) -> Result<Arc<ObjectArtifacts>> {
        let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(found) = open.get(config) {
            return Ok(found.clone());
        }
        let opened = Arc::new(Self::build(config)?);
        open.insert(config.clone(), opened.clone());
        Ok(opened)
    }

    fn build(config: &ObjectsConfig) -> Result<ObjectArtifacts> {
        let bad =
            |key: &str, why: String| Error::invalid_params(format!("storage.objects.{key}"), why);
        let url = url::Url::parse(&config.url)
            .map_err(|err| bad("url", format!("{:?} is not a URL: {err}", config.url)))?;
        let (scheme, prefix) = ObjectStoreScheme::parse(&url)
            .map_err(|err| bad("url", format!("{:?}: {err}", config.url)))?;
        let prefix =
            Path::parse(prefix).map_err(|err| bad("url", format!("{:?}: {err}", config.url)))?;
        let env_prefix = match scheme {
            ObjectStoreScheme::AmazonS3 => "AWS_",
            ObjectStoreScheme::GoogleCloudStorage => "GOOGLE_",
            ObjectStoreScheme::MicrosoftAzure => "AZURE_",
            _ => "",
        };
        let mut options: Vec<(String, String)> = Vec::new();
        if !env_prefix.is_empty() {
            options.extend(
                std::env::vars()
                    .filter(|(key, _)| key.starts_with(env_prefix))
                    .map(|(key, value)| (key.to_ascii_lowercase(), value))
                    .filter(|(key, _)| known_option(&scheme, key)),
            );
        }
        for (key, value) in &config.options {
            let snake = to_snake(key);
            if !known_option(&scheme, &snake) {
                return Err(bad(
                    &format!("options.{key}"),
                    format!("not an option of {scheme:?} storage in object_store"),
                ));
            }
            options.push((snake, value.to_string()));
        }
        let failed = |err: object_store::Error| bad("url", format!("{:?}: {err}", config.url));
        // A store that does not answer fails the request after a few
        // seconds, not after the crate's default of three minutes.
        let retry = object_store::RetryConfig {
            max_retries: 3,
            retry_timeout: std::time::Duration::from_secs(15),
            ..object_store::RetryConfig::default()
        };
        // The environment's proxy and the certificates trusted, as for the
        // proxy's upstreams (PROTOCOL.md 12.2); the options below (a
        // store's own `proxy_url`, say) are applied over them.
        let client = crate::egress::current()
            .and_then(|egress| egress.object_store(object_store::ClientOptions::new()))
            .map_err(|why| Error::invalid_params("storage.objects", why))?;
        macro_rules! build {
            ($builder:ty) => {{
                let mut builder = <$builder>::new()
                    .with_url(url.to_string())
                    .with_retry(retry)
                    .with_client_options(client.clone());
                for (key, value) in options {
                    if let Ok(key) = key.parse() {
                        builder = builder.with_config(key, value);
                    }
                }
                Arc::new(builder.build().map_err(failed)?) as Arc<dyn ObjectStore>
            }};
        }
        let store = match scheme {
            ObjectStoreScheme::AmazonS3 => build!(object_store::aws::AmazonS3Builder),
            ObjectStoreScheme::GoogleCloudStorage => {
                build!(object_store::gcp::GoogleCloudStorageBuilder)
            }
            ObjectStoreScheme::MicrosoftAzure => build!(object_store::azure::MicrosoftAzureBuilder),
            ObjectStoreScheme::Local => {
                let (store, _) = object_store::parse_url(&url).map_err(failed)?;
                Arc::from(store)
            }
            _ => {
                return Err(bad(
                    "url",
                    format!(
                        "{:?}: expected s3://, gs://, az:// (or an https URL of one of them) or file:///",
                        config.url
                    ),
                ));
            }
        };
        Ok(ObjectArtifacts {
            store,
            url: config.url.trim_end_matches('/').to_owned(),
            prefix,
        })
    }

    /// The URL previews name the artifacts of `session` under (no trailing `/`).
    pub fn session_url(&self, session: &str) -> String {
        format!("{}/sessions/{session}/tool-results", self.url)
    }

    /// The object of artifact `name` of `session`.
    pub fn key(&self, session: &str, name: &str) -> Path {
        self.sessions()
            .join(session)
            .join("tool-results")
            .join(name)
    }

    /// Where every session's objects are.
    pub fn sessions(&self) -> Path {
        self.prefix.clone().join("sessions")
    }

    /// The URL of an object of this store.
    pub fn url_of(&self, key: &Path) -> String {
        let rel = key
            .as_ref()
            .strip_prefix(self.prefix.as_ref())
            .unwrap_or(key.as_ref())
            .trim_start_matches('/');
        format!("{}/{rel}", self.url)
    }

    /// The object a preview's location (a URL under this store) names.
    fn key_of_location(&self, location: &FsPath) -> io::Result<Path> {
        let text = location.to_string_lossy();
        let rel = text
            .strip_prefix(&self.url)
            .and_then(|rest| rest.strip_prefix('/'))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{text} is not under {}", self.url),
                )
            })?;
        let mut key = self.prefix.clone();
        for part in rel.split('/') {
            key = key.join(part);
        }
        Ok(key)
    }

    /// The object's size and version, or `None` when there is none.
    pub fn head(&self, key: &Path) -> io::Result<Option<ObjectMeta>> {
        match wait(self.store.head(key))? {
            Ok(meta) => Ok(Some(meta)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(err) => Err(unavailable(err)),
        }
    }

    /// The whole object, or `None`.
    pub fn get(&self, key: &Path) -> io::Result<Option<Bytes>> {
        let fetch = async {
            match self.store.get(key).await {
                Ok(got) => got.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(err) => Err(err),
            }
        };
        wait(fetch)?.map_err(unavailable)
    }

    /// Bytes `start..end` of the object.
    pub fn get_range(&self, key: &Path, start: u64, end: u64) -> io::Result<Bytes> {
        wait(self.store.get_range(key, start..end))?.map_err(unavailable)
    }

    /// Write `bytes` at `key` unless something is there; `false` when
    /// something was.
    fn create(&self, key: &Path, bytes: Bytes) -> io::Result<bool> {
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match wait(
            self.store
                .put_opts(key, PutPayload::from_bytes(bytes), opts),
        )? {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(err) => Err(unavailable(err)),
        }
    }

    /// Every object under `prefix`.
    pub fn list(&self, prefix: &Path) -> io::Result<Vec<ObjectMeta>> {
        let listed = wait(async {
            let mut out = Vec::new();
            let mut stream = self.store.list(Some(prefix));
            while let Some(meta) = stream.next().await {
                out.push(meta?);
            }
            Ok::<_, object_store::Error>(out)
        })?;
        listed.map_err(unavailable)
    }

    /// The names of the "folders" directly under `prefix` (the common
    /// prefixes of a delimited listing), without their objects: gc learns
    /// which sessions the bucket holds without listing every output.
    pub fn list_dirs(&self, prefix: &Path) -> io::Result<Vec<String>> {
        let listed = wait(self.store.list_with_delimiter(Some(prefix)))?;
        let listed = listed.map_err(unavailable)?;
        Ok(listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_owned))
            .collect())
    }

    /// Remove an object; `false` when it was not there.
    pub fn delete(&self, key: &Path) -> io::Result<bool> {
        match wait(self.store.delete(key))? {
            Ok(()) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(err) => Err(unavailable(err)),
        }
    }

    /// The line index stored beside a text artifact, if there is a valid one.
    pub fn index(&self, key: &Path) -> io::Result<Option<LineIndex>> {
        let Some(bytes) = self.get(&index_key(key))? else {
            return Ok(None);
        };
        Ok(serde_json::from_slice(&bytes).ok())
    }

    /// A reader of the object that fetches only the ranges read.
    pub fn reader(&self, key: &Path, len: u64) -> RangedReader<'_> {
        RangedReader {
            objects: self,
            key: key.clone(),
            len,
            pos: 0,
            buf: Bytes::new(),
            buf_start: 0,
            chunk: FIRST_CHUNK,
        }
    }
}

/// The key of a text artifact's line index.
pub fn index_key(key: &Path) -> Path {
    Path::from(format!("{}{INDEX_SUFFIX}", key.as_ref()))
}

impl ArtifactStore for ObjectArtifacts {
    /// `path` is the artifact's URL (what the preview names).
    fn write_once(&self, path: &FsPath, bytes: &[u8], _fsync: bool) -> io::Result<Written> {
        let key = self.key_of_location(path)?;
        let body = Bytes::copy_from_slice(bytes);
        if key.as_ref().ends_with(".txt") {
            // The index first: an artifact anyone can see has its index.
            // It is a function of the bytes, so whoever wrote one first
            // wrote this one.
            let index = LineIndex::build(&mut &bytes[..], &|| false)?;
            let json = serde_json::to_vec(&index).map_err(io::Error::other)?;
            self.create(&index_key(&key), Bytes::from(json))?;
        }
        if self.create(&key, body)? {
            return Ok(Written { reused: false });
        }
        // Another writer got there first: theirs stands if it is ours.
        match self.get(&key)? {
            Some(existing) if existing == bytes => Ok(Written { reused: true }),
            _ => Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} already exists with other content; not replacing it",
                    path.display()
                ),
            )),
        }
    }
}

/// `Read + Seek` over an object by ranged `GET`s: a read past the buffer
/// fetches the next chunk, growing while reads are sequential.
pub struct RangedReader<'a> {
    objects: &'a ObjectArtifacts,
    key: Path,
    len: u64,
    pos: u64,
    buf: Bytes,
    buf_start: u64,
    chunk: u64,
}

impl Read for RangedReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.len || out.is_empty() {
            return Ok(0);
        }
        let buf_end = self.buf_start + self.buf.len() as u64;
        if !(self.buf_start..buf_end).contains(&self.pos) {
            if self.pos == buf_end && !self.buf.is_empty() {
                self.chunk = (self.chunk * 2).min(MAX_CHUNK);
            } else {
                self.chunk = FIRST_CHUNK;
            }
            let end = (self.pos + self.chunk).min(self.len);
            self.buf = self.objects.get_range(&self.key, self.pos, end)?;
            self.buf_start = self.pos;
            if self.buf.is_empty() {
                return Ok(0);
            }
        }
        let at = (self.pos - self.buf_start) as usize;
        let n = out.len().min(self.buf.len() - at);
        out[..n].copy_from_slice(&self.buf[at..at + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for RangedReader<'_> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = target
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        Ok(self.pos)
    }
}

/// Whether `key` (snake_case) is one of `object_store`'s options for `scheme`.
fn known_option(scheme: &ObjectStoreScheme, key: &str) -> bool {
    match scheme {
        ObjectStoreScheme::AmazonS3 => key.parse::<object_store::aws::AmazonS3ConfigKey>().is_ok(),
        ObjectStoreScheme::GoogleCloudStorage => {
            key.parse::<object_store::gcp::GoogleConfigKey>().is_ok()
        }
        ObjectStoreScheme::MicrosoftAzure => {
            key.parse::<object_store::azure::AzureConfigKey>().is_ok()
        }
        _ => key.parse::<object_store::ClientConfigKey>().is_ok(),
    }
}

/// `allowHttp` → `allow_http` (configuration keys arrive camel-cased).
fn to_snake(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for ch in key.chars() {
        if ch.is_ascii_uppercase() {
            out.push('_');
            out.push(ch.to_ascii_lowercase());
        } else {
            out.push(ch);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_names_in_either_case() {
        assert_eq!(to_snake("allowHttp"), "allow_http");
        assert_eq!(to_snake("aws_endpoint"), "aws_endpoint");
        assert!(known_option(&ObjectStoreScheme::AmazonS3, "allow_http"));
        assert!(known_option(&ObjectStoreScheme::AmazonS3, "endpoint"));
        assert!(!known_option(&ObjectStoreScheme::AmazonS3, "nonsense"));
    }
}
