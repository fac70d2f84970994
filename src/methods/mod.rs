//! The method table: every custom method, where it runs, and its handler.
//!
//! A method runs in one of two ways, declared here once:
//!
//! - `session`: it changes a session. The reader parses its params (for
//!   `pair/append`, only their session id) and pushes it onto that
//!   session's queue at once, so it takes effect in arrival order; the
//!   handler gets the session exclusively.
//! - `concurrent`: it reads published snapshots or touches no session; it
//!   runs on its own task. (`raw`: the same, serializing its result
//!   itself, for replies too large to build as values first.)
//!
//! Adding a method is a file here, its types in `protocol.rs` and one line
//! in [`method_table!`].

mod artifact_read;
mod budget_apply;
mod pair_append;
mod pair_flush;
mod state_fork;
mod state_get;
mod state_reconstruct;
mod storage_gc;
mod transcript_check;
mod transcript_repair;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use futures_util::future::BoxFuture;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::config::Effective;
use crate::error::{Error, Result};
use crate::protocol::{self, Method, ProgressToken, SessionId};
use crate::session::{Registry, Runs, Session, Slot};
use crate::transport::{Incoming, Outbox};

/// What a handler knows about the request it serves.
#[derive(Clone)]
pub struct RequestCx {
    pub registry: Registry,
    pub conn: Arc<ConnShared>,
    pub config: Arc<Effective>,
    pub cancel: CancellationToken,
}

/// Per-connection facts shared with handlers.
pub struct ConnShared {
    pub id: u64,
    pub outbox: Outbox,
    /// Sessions this connection appended to: their pairs are flushed when
    /// the connection ends.
    pub touched: Mutex<crate::session::SessionTable<Arc<Slot>>>,
}

impl RequestCx {
    pub fn check_cancelled(&self) -> Result<()> {
        if self.cancel.is_cancelled() {
            Err(Error::Cancelled)
        } else {
            Ok(())
        }
    }

    pub fn slot(&self, id: &SessionId) -> Arc<Slot> {
        self.registry.slot(&self.config.data_dir, id)
    }

    /// Send an LSP `$/progress` notification when the client gave a token.
    pub fn progress(&self, token: Option<&ProgressToken>, value: Value) {
        if let Some(token) = token {
            self.conn
                .outbox
                .notify("$/progress", json!({ "token": token, "value": value }));
        }
    }
}

/// A reply that may complete after the session's queue moves on (a fork
/// finishes in its target session's queue, never blocking the source's).
pub enum Reply<T> {
    Now(T),
    Later(BoxFuture<'static, Result<T>>),
}

pub trait SessionMethod: Method {
    fn session_id(params: &Self::Params) -> &SessionId;
    /// Decode the params from the request's parsed value (by default as
    /// [`params`] does; a method carrying a conversation takes its messages
    /// out as they are instead of building them again).
    fn params(value: Value) -> Result<Self::Params> {
        params(value)
    }
    /// Decode the params straight from their JSON text, skipping the
    /// parsed value, when that is quicker and gives the same params; `None`
    /// sends them through [`SessionMethod::params`] (which also words any
    /// error). `Some` only for text that is one JSON value: text the reader
    /// has not checked ([`dispatch_unchecked`]) is checked by this parse.
    fn params_from_text(_text: &[u8]) -> Option<Self::Params> {
        None
    }
    /// Whether params given as text are decoded on the session's task
    /// rather than by the reader, which then reads only their `sessionId`
    /// (see [`text_session`]), and leaves checking that they are JSON to
    /// that decoding (see [`dispatch_unchecked`]).
    const DECODED_BY_SESSION: bool = false;
    /// Where the handler runs (see [`Runs`]): on the session's worker
    /// unless these params make work whose small blocks are worth a
    /// thread of their own.
    fn runs(_params: &Self::Params) -> Runs {
        Runs::OnWorker
    }
    fn run<'a>(
        session: &'a mut Session,
        cx: &'a RequestCx,
        params: Self::Params,
    ) -> BoxFuture<'a, Result<Reply<Self::Result>>>;
}

pub trait ConcurrentMethod: Method {
    fn run(cx: RequestCx, params: Self::Params) -> BoxFuture<'static, Result<Self::Result>>;
}

/// A concurrent method whose result is serialized straight from what it
/// reads (its reply may be tens of MB: `state/get` of a large session),
/// never built as a tree of values first. Its JSON must match
/// `Self::Result`, which still gives its schema.
pub trait ConcurrentRawMethod: Method {
    fn run(cx: RequestCx, params: Self::Params) -> BoxFuture<'static, Result<Box<RawValue>>>;
}

/// The answer to a request, once it is ready: its result, already encoded.
pub type Pending = BoxFuture<'static, Result<Box<RawValue>>>;
type Route = fn(RequestCx, Value, Respond);
/// A route taking the params as their JSON text (see [`dispatch_text`]).
type TextRoute = fn(RequestCx, &RawValue, Respond);
/// A route taking the params as text not yet checked to be JSON, with the
/// session they name (see [`dispatch_unchecked`]).
pub type UncheckedRoute = fn(RequestCx, SessionId, UncheckedBody, Respond);

/// Where a request's answer goes, used once. It travels with the request's
/// work, so a session method answers from its session's task as soon as
/// the handler returns, rather than through a task of its own woken by a
/// channel: a pair commit is then one task switch, not three, which is
/// most of what a small request costs. Dropped unanswered (its job was
/// dropped with its session, or panicked), it answers with an error, so
/// every request still gets exactly one answer.
pub struct Respond(Option<Answer>);

/// What a [`Respond`] does with the answer: the id to answer with, when
/// another than the request's ([`Respond::send_as`]), and the answer.
type Answer = Box<dyn FnOnce(Option<Value>, Result<Box<RawValue>>) + Send>;

impl Respond {
    pub fn new(
        answer: impl FnOnce(Option<Value>, Result<Box<RawValue>>) + Send + 'static,
    ) -> Respond {
        Respond(Some(Box::new(answer)))
    }

    pub fn send(self, result: Result<Box<RawValue>>) {
        self.answer(None, result);
    }

    /// Answer with `id` in place of the request's: a body the reader took
    /// for a request, unchecked, that turned out to be no JSON is answered
    /// as the reader answers such a body (with id `null`).
    pub fn send_as(self, id: Value, result: Result<Box<RawValue>>) {
        self.answer(Some(id), result);
    }

    fn answer(mut self, id: Option<Value>, result: Result<Box<RawValue>>) {
        if let Some(answer) = self.0.take() {
            answer(id, result);
        }
    }

    /// Answer once `pending` completes, on a task of its own.
    fn when_done(self, pending: Pending) {
        tokio::spawn(async move { self.send(pending.await) });
    }
}

impl Drop for Respond {
    fn drop(&mut self) {
        if let Some(answer) = self.0.take() {
            answer(None, Err(Error::Internal("session job was dropped".into())));
        }
    }
}

/// Decode a method's params: an object (by name), or nothing at all.
pub fn params<P: serde::de::DeserializeOwned>(value: Value) -> Result<P> {
    let value = match value {
        Value::Null => json!({}),
        Value::Array(_) => return Err(by_position()),
        value => value,
    };
    crate::error::from_value(value, "")
}

/// Every toolwire method names its params; a JSON-RPC by-position array is
/// refused rather than mapped onto fields in declaration order.
pub fn by_position() -> Error {
    Error::invalid_params(
        "params",
        "params must be an object (by name); by-position params are not accepted",
    )
}

/// Encode a result straight to JSON text (no intermediate `Value`).
pub fn encode<T: serde::Serialize>(result: T) -> Result<Box<RawValue>> {
    serde_json::value::to_raw_value(&result)
        .map_err(|err| Error::Internal(format!("encoding result: {err}")))
}

fn route_session<M: SessionMethod + 'static>(cx: RequestCx, raw: Value, respond: Respond) {
    match M::params(raw) {
        Ok(params) => queue_session::<M>(cx, params, respond),
        Err(err) => respond.send(Err(err)),
    }
}

/// Session params given as text. A method whose params carry a message
/// (`pair/append`) has them decoded by the session's task: the reader
/// reads only the session id, and the text goes along as it is. Decoded by
/// the reader, the message's values (dozens of small blocks) were made on
/// one thread and freed on another, which defeats the allocator's
/// per-thread caches: every one of those frees and the reader's next
/// allocations took glibc's slow path, a fifth of a small request's
/// instructions. Params whose session id the quick read cannot take (an
/// escape in it, a duplicate key, no such member) go the reader's way,
/// which answers them as it always has.
fn text_session<M: SessionMethod + 'static>(cx: RequestCx, text: &RawValue, respond: Respond) {
    if M::DECODED_BY_SESSION
        && let Some(id) = session_of_text(text)
    {
        return queue_text::<M>(cx, id, ParamsText::Checked(text.to_owned()), respond);
    }
    match M::params_from_text(text.get().as_bytes()) {
        Some(params) => queue_session::<M>(cx, params, respond),
        None => via_value(route_session::<M>, cx, text, respond),
    }
}

/// A session method's params not checked by the reader: the session's
/// task checks them as it decodes them ([`decode_text`]).
fn unchecked_session<M: SessionMethod + 'static>(
    cx: RequestCx,
    id: SessionId,
    body: UncheckedBody,
    respond: Respond,
) {
    queue_text::<M>(cx, id, ParamsText::Unchecked(body), respond);
}

/// The body of a request spelled as `transport::envelope::plain_envelope`
/// reads it, whose params the reader has not checked are JSON.
pub struct UncheckedBody {
    pub body: Box<[u8]>,
    /// Where the params stand in `body`.
    pub params: std::ops::Range<usize>,
}

/// Params queued as text with the session they name.
enum ParamsText {
    /// Checked by the reader to be one JSON value.
    Checked(Box<RawValue>),
    /// Not checked ([`dispatch_unchecked`]).
    Unchecked(UncheckedBody),
}

impl ParamsText {
    fn bytes(&self) -> &[u8] {
        match self {
            ParamsText::Checked(text) => text.get().as_bytes(),
            ParamsText::Unchecked(body) => body.body.get(body.params.clone()).unwrap_or_default(),
        }
    }
}

/// Decode params queued as text as the reader would have: through the
/// value when the quick decoding declines (which words any error), and,
/// for params the reader did not check that are no JSON value, as the
/// reader reads such a body (the serde reading of the whole body refuses
/// it too, params that fail at the top failing nested). The error's id,
/// when it is not the request's, goes with it.
fn decode_text<M: SessionMethod>(text: &ParamsText) -> std::result::Result<M::Params, Refusal> {
    let refused = |id, err| Box::new((id, err));
    if let Some(params) = M::params_from_text(text.bytes()) {
        return Ok(params);
    }
    if let ParamsText::Unchecked(body) = text
        && serde_json::from_slice::<&RawValue>(text.bytes()).is_err()
    {
        let value = crate::json::request_or_refusal(&body.body).map_err(|refusal| {
            let (id, err) = *refusal;
            refused(Some(id), err)
        })?;
        return match Incoming::classify(value) {
            Incoming::Request { params, .. } => M::params(params).map_err(|e| refused(None, e)),
            Incoming::Invalid { id, error } => Err(refused(Some(id), error)),
            // Not with this envelope, which has an id and a method.
            Incoming::Notification { .. } | Incoming::Response => Err(refused(
                None,
                Error::Internal("a request read as no request".into()),
            )),
        };
    }
    crate::json::from_slice::<Value>(text.bytes())
        .map_err(|err| Error::Parse(err.to_string()))
        .and_then(M::params)
        .map_err(|e| refused(None, e))
}

/// Why params queued as text were refused, and the id to answer with
/// when it is not the request's.
type Refusal = Box<(Option<Value>, Error)>;

/// The `sessionId` member of params given as text, read without decoding
/// the rest; `None` when it is not a plain valid session id.
fn session_of_text(text: &RawValue) -> Option<SessionId> {
    #[derive(serde::Deserialize)]
    struct Target<'a> {
        #[serde(rename = "sessionId", borrow)]
        session_id: &'a str,
    }
    let id = match leading_session_id(text.get().as_bytes()) {
        Some(id) => id,
        None => serde_json::from_str::<Target>(text.get()).ok()?.session_id,
    };
    SessionId::try_from(id.to_owned()).ok()
}

/// The session id of params that begin `{"sessionId":"ID",` with no escape
/// in ID, found without scanning the rest as JSON: the parse above walks
/// the whole message (about a twelfth of the server's instructions per
/// pair over stdio). Only where nothing after it can be another
/// `sessionId` member, which would take its place as the last one: the
/// name appears nowhere else, and no `\u` escape could spell it. Anything
/// else is left to the parse. In JSON the string ends where its first
/// unescaped quote is; in text that is no JSON, the id found only queues
/// the request on a session whose task then finds the text is none.
fn leading_session_id(text: &[u8]) -> Option<&str> {
    let rest = text.strip_prefix(br#"{"sessionId":""#)?;
    let end = memchr::memchr2(b'"', b'\\', rest)?;
    let (id, after) = rest.split_at(end);
    let after = after.strip_prefix(b"\"")?;
    // Built once: `memmem::find` builds its searcher on every call, which
    // was 1.5% of the server's instructions per small pair.
    static FINDERS: LazyLock<[memchr::memmem::Finder<'static>; 2]> = LazyLock::new(|| {
        [
            memchr::memmem::Finder::new(b"sessionId"),
            memchr::memmem::Finder::new(b"\\u"),
        ]
    });
    if FINDERS.iter().any(|f| f.find(after).is_some()) {
        return None;
    }
    std::str::from_utf8(id).ok()
}

/// Queue params still as text on session `id`'s task, which decodes them
/// as [`text_session`] would have (and answers any error the same way).
fn queue_text<M: SessionMethod + 'static>(
    cx: RequestCx,
    id: SessionId,
    text: ParamsText,
    respond: Respond,
) {
    let slot = cx.slot(&id);
    let _ = slot.enqueue(Box::new(move |session| {
        Box::pin(async move {
            let params = decode_text::<M>(&text);
            drop(text);
            match params {
                // The same text read twice names the same session; checked
                // all the same, since the job runs on that session only.
                Ok(params) if *M::session_id(&params) == id => {
                    answer::<M>(session, cx, params, respond).await;
                }
                Ok(_) => respond.send(Err(Error::Internal(
                    "the params named two session ids".into(),
                ))),
                Err(refusal) => match *refusal {
                    (Some(id), err) => respond.send_as(id, Err(err)),
                    (None, err) => respond.send(Err(err)),
                },
            }
        })
    }));
}

fn text_concurrent<M: ConcurrentMethod>(cx: RequestCx, text: &RawValue, respond: Respond) {
    via_value(route_concurrent::<M>, cx, text, respond);
}

fn text_raw<M: ConcurrentRawMethod>(cx: RequestCx, text: &RawValue, respond: Respond) {
    via_value(route_raw::<M>, cx, text, respond);
}

/// Parse params given as text into a value and take the ordinary route.
fn via_value(route: Route, cx: RequestCx, text: &RawValue, respond: Respond) {
    match crate::json::from_slice::<Value>(text.get().as_bytes()) {
        Ok(value) => route(cx, value, respond),
        Err(err) => respond.send(Err(Error::Parse(err.to_string()))),
    }
}

fn queue_session<M: SessionMethod + 'static>(cx: RequestCx, params: M::Params, respond: Respond) {
    let slot = cx.slot(M::session_id(&params));
    let runs = M::runs(&params);
    // Should the session be gone, the job is dropped with `respond` in it,
    // which answers; nothing more to say here.
    let _ = slot.enqueue_to_run(
        Box::new(move |session| Box::pin(answer::<M>(session, cx, params, respond))),
        runs,
    );
}

/// Run a session method's handler on its session and answer.
async fn answer<M: SessionMethod>(
    session: &mut Session,
    cx: RequestCx,
    params: M::Params,
    respond: Respond,
) {
    let outcome = match cx.check_cancelled() {
        Ok(()) => M::run(session, &cx, params).await,
        Err(err) => Err(err),
    };
    match outcome {
        Ok(Reply::Now(result)) => respond.send(encode(result)),
        Ok(Reply::Later(later)) => {
            respond.when_done(Box::pin(async move { encode(later.await?) }));
        }
        Err(err) => respond.send(Err(err)),
    }
}

fn route_concurrent<M: ConcurrentMethod>(cx: RequestCx, raw: Value, respond: Respond) {
    match params::<M::Params>(raw) {
        Ok(params) => respond.when_done(Box::pin(async move { encode(M::run(cx, params).await?) })),
        Err(err) => respond.send(Err(err)),
    }
}

fn route_raw<M: ConcurrentRawMethod>(cx: RequestCx, raw: Value, respond: Respond) {
    match params::<M::Params>(raw) {
        Ok(params) => respond.when_done(M::run(cx, params)),
        Err(err) => respond.send(Err(err)),
    }
}

/// Something that wants to see every method with its types (schemas, docs).
pub trait MethodVisitor {
    fn visit<M: Method>(&mut self, exec: Exec);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exec {
    Lifecycle,
    Session,
    Concurrent,
}

macro_rules! method_table {
    ($($exec:ident $ty:ident),* $(,)?) => {
        /// Names of every custom method, for `initialize`'s capabilities.
        pub const CUSTOM_METHODS: &[&str] = &[$(<protocol::$ty as Method>::NAME),*];

        /// Looked up on every request: XXH3 rather than SipHash.
        static ROUTES: LazyLock<HashMap<&'static str, (Route, TextRoute, Option<UncheckedRoute>), crate::state::IdHash>> = LazyLock::new(|| {
            HashMap::from_iter([$((<protocol::$ty as Method>::NAME, method_table!(@route $exec $ty))),*])
        });

        /// Visit every method the server answers, lifecycle ones first.
        pub fn visit_all(visitor: &mut impl MethodVisitor) {
            visitor.visit::<protocol::Initialize>(Exec::Lifecycle);
            visitor.visit::<protocol::Shutdown>(Exec::Lifecycle);
            $(visitor.visit::<protocol::$ty>(method_table!(@exec $exec));)*
        }
    };
    (@route session $ty:ident) => {
        (
            route_session::<protocol::$ty> as Route,
            text_session::<protocol::$ty> as TextRoute,
            <protocol::$ty as SessionMethod>::DECODED_BY_SESSION
                .then_some(unchecked_session::<protocol::$ty> as UncheckedRoute),
        )
    };
    (@route concurrent $ty:ident) => {
        (route_concurrent::<protocol::$ty> as Route, text_concurrent::<protocol::$ty> as TextRoute, None)
    };
    (@route raw $ty:ident) => {
        (route_raw::<protocol::$ty> as Route, text_raw::<protocol::$ty> as TextRoute, None)
    };
    (@exec session) => { Exec::Session };
    (@exec concurrent) => { Exec::Concurrent };
    (@exec raw) => { Exec::Concurrent };
}

method_table! {
    session BudgetApply,
    session StateFork,
    session StateReconstruct,
    raw StateGet,
    session PairAppend,
    session PairFlush,
    concurrent TranscriptRepair,
    concurrent ArtifactRead,
    concurrent StorageGc,
    concurrent TranscriptCheck,
}

/// Start a custom method: parse its params and queue or spawn its work,
/// which answers through `respond`. Never waits for other work; errors
/// here are answered at once.
pub fn dispatch(method: &str, cx: RequestCx, params: Value, respond: Respond) {
    match ROUTES.get(method) {
        Some((route, _, _)) => route(cx, params, respond),
        None => respond.send(Err(Error::MethodNotFound(method.to_owned()))),
    }
}

/// How to start `method` given its params (an object) as JSON text, when
/// it is a custom method: [`dispatch`] without a parsed value of the
/// whole request first. A small request (a pair's half) then costs one
/// parse of its message rather than two (a value, then the params built
/// again from it).
pub fn dispatch_text(method: &str) -> Option<TextRoute> {
    ROUTES.get(method).map(|(_, text, _)| *text)
}

/// How to start `method` given its params as text the reader has not
/// checked are JSON, with the session they name: for a method whose
/// session's task decodes the params anyway (`pair/append`), which checks
/// them in that one parse rather than the reader walking the same bytes
/// first (about a tenth of a small pair's instructions). Params that turn
/// out to be no JSON are answered there as the reader answers such a body
/// ([`decode_text`]). `None` for any other method, or params whose session
/// id the quick read cannot take: the reader checks them, and goes on as
/// [`dispatch_text`] does.
pub fn dispatch_unchecked(method: &str, params: &[u8]) -> Option<(UncheckedRoute, SessionId)> {
    let route = ROUTES.get(method)?.2?;
    let id = leading_session_id(params)?;
    Some((route, SessionId::try_from(id.to_owned()).ok()?))
}

pub use budget_apply::Applied;
pub use budget_apply::apply as budget_apply;
pub use budget_apply::apply_queued as budget_apply_queued;
pub use budget_apply::apply_queued_tracked as budget_apply_queued_tracked;
pub use budget_apply::reapply_known_queued;
pub use pair_flush::flush_for_connection;
