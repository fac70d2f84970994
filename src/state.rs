//! Per-session replacement state: which tool_use ids have their fate
//! decided, and the exact replacement string of those that were replaced.
//!
//! Both sets live in one map from id to `Option<replacement>`, so "an id
//! has a replacement only if it is seen" holds by construction. The map is
//! split into shards behind reference counts: a snapshot (a fork, the
//! published state readers see) is an O(1) clone that shares every shard,
//! and a later commit copies only the shards it touches. Measured against a
//! hash-trie (`rpds`), this holds 100,000 ids in about half the memory
//! (docs/design.md, "Per-session state is compact").
//!
//! Replacements are kept zstd-compressed with their sizes precomputed in
//! every unit: a session holds thousands of ~2 KB previews, which would
//! otherwise dominate its memory, while a preview is only decompressed when
//! a message that carries it is rendered.

use std::sync::Arc;

use crate::format::SizeUnit;
use crate::format::{Digest, DigestKind};

/// One replacement string, stored compactly: its sizes (in chars, UTF-16
/// units and bytes) and its packed text in one shared allocation, so a
/// clone is a reference count and a state holds a single pointer to it.
/// (A `Box` of the text behind an `Arc` of the sizes took two allocations
/// and 16 bytes more, 688 bytes for a typical preview where this takes 672.)
#[derive(Clone)]
pub struct Replacement(triomphe::ThinArc<[u64; 3], u8>);

// A decision without a replacement costs a table entry no more than one
// with: an absent replacement is the null pointer.
const _: () = assert!(std::mem::size_of::<Option<Replacement>>() == 8);

impl Replacement {
    pub fn new(text: &str) -> Self {
        let sizes = [
            SizeUnit::Chars.len(text),
            SizeUnit::Utf16.len(text),
            SizeUnit::Bytes.len(text),
        ];
        compress(text.as_bytes(), |packed| {
            crate::heap::apart(|| {
                Replacement(triomphe::ThinArc::from_header_and_slice(sizes, packed))
            })
        })
    }

    fn packed(&self) -> &[u8] {
        &self.0.slice
    }

    /// Length in chars, UTF-16 units and bytes.
    fn sizes(&self) -> &[u64; 3] {
        &self.0.header.header
    }

    /// The exact replacement string.
    pub fn text(&self) -> String {
        // The bytes were compressed from a `String` by `new`: they decode.
        decompress(self.packed(), self.size(SizeUnit::Bytes) as usize)
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .unwrap_or_default()
    }

    pub fn size(&self, unit: SizeUnit) -> u64 {
        let sizes = self.sizes();
        match unit {
            SizeUnit::Chars => sizes[0],
            SizeUnit::Utf16 => sizes[1],
            SizeUnit::Bytes => sizes[2],
        }
    }

    /// Bytes of memory held for the text.
    pub fn packed_len(&self) -> usize {
        self.packed().len()
    }

    /// Its sizes and packed text as [`Replacement::from_packed`] takes them
    /// back (for a decisions checkpoint, which keeps them packed so a
    /// resume neither compresses nor decompresses anything).
    pub fn to_packed(&self) -> (&[u64; 3], &[u8]) {
        (self.sizes(), self.packed())
    }

    /// A replacement from what [`Replacement::to_packed`] gave, in this
    /// build's packing ([`packing_id`]); `None` when the packed text does
    /// not start with a tag this build writes.
    pub fn from_packed(sizes: [u64; 3], packed: &[u8]) -> Option<Self> {
        matches!(packed.first(), Some(&ZSTD | &RAW)).then(|| {
            crate::heap::apart(|| {
                Replacement(triomphe::ThinArc::from_header_and_slice(sizes, packed))
            })
        })
    }
}

/// Names the packing of replacements (its dictionary and tags): packed
/// text saved by one build is taken back only by a build that packs the
/// same way.
pub fn packing_id() -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(DICTIONARY, u64::from(ZSTD) << 8 | u64::from(RAW))
}

impl std::fmt::Debug for Replacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Replacement").field(&self.text()).finish()
    }
}

impl PartialEq for Replacement {
    fn eq(&self, other: &Self) -> bool {
        self.sizes() == other.sizes() && self.text() == other.text()
    }
}

/// A decided id: the original it was decided on and its replacement.
#[derive(Clone)]
struct Decision {
    digest: Digest,
    replacement: Option<Replacement>,
}

/// A tool_use id as sessions hold it: shared and immutable, with a single
/// count in front of its bytes (no weak count, which nothing here uses).
/// A typical 30-byte id then takes a 48-byte allocation instead of the 64
/// of `std::sync::Arc<str>`: 1.6 MB of a session of 100,000 ids.
pub type Id = triomphe::Arc<str>;

/// An id the state will keep, allocated with what sessions keep (see
/// `heap`), apart from the request it came in.
pub fn keep_id(id: &str) -> Id {
    crate::heap::apart(|| Id::from(id))
}

type Shard = std::collections::HashMap<Id, Decision, IdHash>;

/// Decisions on further originals of ids already decided once (providers
/// that reuse call ids across turns); almost always empty.
type Reused = std::collections::HashMap<(Id, Digest), Option<Replacement>, IdHash>;

/// How the state's tables hash ids: XXH3 of the bytes, seeded once per
/// process at random (so no client can choose ids that collide). Reading
/// a session back inserts every id it has ever decided, looked up again
/// as each later decision is checked; SipHash, the default, made hashing
/// the largest part of a resume.
#[derive(Clone, Copy)]
pub struct IdHash(u64);

impl Default for IdHash {
    fn default() -> Self {
        static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        IdHash(*SEED.get_or_init(|| fastrand::u64(..)))
    }
}

impl std::hash::BuildHasher for IdHash {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(self.0)
    }
}

/// The hasher of [`IdHash`]: each write is hashed whole with the state so
/// far as its seed.
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0 = xxhash_rust::xxh3::xxh3_64_with_seed(bytes, self.0);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Shards per state. A commit copies the shards it touches while a
/// snapshot shares them, so fewer shards cost more per decision: one
/// decision onto 100,000 published ids takes 34 µs here, 6.6 µs with 256
/// shards (`cargo bench --bench planner -- commit`). But a request deciding
/// a thousand results touches every shard either way, and at 256 each shard
/// table (~20 KB at 100,000 ids) stays under glibc's mmap threshold: the
/// tables every such request frees were cut up for the next request's
/// small values, leaving a session built by `budget/apply` at 51 MB where
/// its reconstruction holds 31. At 32 a large session's tables (~160 KB)
/// are mapped and unmapped whole: 39 MB (`cargo bench --bench memory --
/// apply`).
const SHARDS: usize = 32;

/// How hard previews are compressed. zstd's entropy coding keeps a 2 KB
/// preview of tool output in about half of what LZ4 needs (the measure is
/// `replacements_pack_small` below); level 1 is already most of that gain,
/// at a few microseconds a preview.
const LEVEL: i32 = 1;

/// First byte of a packed replacement: how the rest is stored.
const ZSTD: u8 = 1;
const RAW: u8 = 0;

/// What every preview toolwire writes has in common (its frame, the words
/// of its header, the parts of a saved output's path), given to zstd as a
/// dictionary. A 2 KB preview compresses to about 690 bytes without it, of
/// which the header, met for the first time in each frame, takes a tenth;
/// with it, to about 610. Most likely matches last: they get the shortest
/// offsets. The packed form lives only in memory, so this may change
/// freely.
const DICTIONARY: &[u8] = b" omitted ...\n\n... \n</persisted-output>\
    .json.txt/.toolwire/sessions//tool-results/toolu_01call_\
    <persisted-output>\nOutput too large ( bytes). Full output saved to: \
    /\n\nPreview (first 2KB and last 2KB):\n";

/// A compression context with the preview dictionary, and the frame
/// fields a preview does not need (its size is kept beside it, and it has
/// no dictionary id to name).
fn compressor() -> Option<zstd::bulk::Compressor<'static>> {
    use zstd::zstd_safe::CParameter;
    let mut ctx = zstd::bulk::Compressor::with_dictionary(LEVEL, DICTIONARY).ok()?;
    ctx.set_parameter(CParameter::ContentSizeFlag(false)).ok()?;
    ctx.set_parameter(CParameter::DictIdFlag(false)).ok()?;
    Some(ctx)
}

/// A tag byte and a zstd frame, handed to `keep` to be copied at its exact
/// size. Compressing straight into a fresh worst-case buffer and shrinking
/// it would leave a hole beside every live replacement; a per-thread
/// scratch buffer and context avoid that (and a context per call).
fn compress<R>(input: &[u8], keep: impl FnOnce(&[u8]) -> R) -> R {
    thread_local! {
        static SCRATCH: std::cell::RefCell<(Vec<u8>, Option<zstd::bulk::Compressor<'static>>)> =
            const { std::cell::RefCell::new((Vec::new(), None)) };
    }
    SCRATCH.with_borrow_mut(|(scratch, ctx)| {
        let bound = 1 + zstd::zstd_safe::compress_bound(input.len());
        if scratch.len() < bound {
            scratch.resize(bound, 0);
        }
        if ctx.is_none() {
            *ctx = compressor();
        }
        scratch[0] = ZSTD;
        let packed = ctx
            .as_mut()
            .and_then(|ctx| ctx.compress_to_buffer(input, &mut scratch[1..]).ok());
        match packed {
            Some(n) => keep(&scratch[..1 + n]),
            // Only a context that cannot be made lands here: keep it as is
            // (the bound is never less than the input).
            None => {
                scratch[0] = RAW;
                scratch[1..=input.len()].copy_from_slice(input);
                keep(&scratch[..=input.len()])
            }
        }
    })
}

/// The text again. A context per thread, made once: creating one per call
/// (what `zstd::bulk::decompress` does) cost more than decompressing a 2 KB
/// preview, and a reply renders hundreds of them.
fn decompress(packed: &[u8], len: usize) -> Option<Vec<u8>> {
    thread_local! {
        static CTX: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    match packed.split_first()? {
        (&ZSTD, frame) => CTX.with_borrow_mut(|ctx| {
            if ctx.is_none() {
                *ctx = zstd::bulk::Decompressor::with_dictionary(DICTIONARY).ok();
            }
            ctx.as_mut()?.decompress(frame, len).ok()
        }),
        (&RAW, bytes) => Some(bytes.to_vec()),
        _ => None,
    }
}

#[derive(Clone, Default)]
pub struct ReplacementState {
    shards: Arc<Vec<Option<Arc<Shard>>>>,
    reused: Arc<Reused>,
    seen_count: usize,
    replacement_count: usize,
}

/// The shard of an id: a fixed (unseeded) hash, so it is stable.
fn shard_of(id: &str) -> usize {
    (xxhash_rust::xxh3::xxh3_64(id.as_bytes()) as usize) % SHARDS
}

/// What the state knows of one original.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fate<'a> {
    Fresh,
    Frozen,
    Replaced(&'a Replacement),
}

fn fate_of(replacement: &Option<Replacement>) -> Fate<'_> {
    match replacement {
        None => Fate::Frozen,
        Some(r) => Fate::Replaced(r),
    }
}

impl ReplacementState {
    fn get(&self, id: &str) -> Option<&Decision> {
        self.shards.get(shard_of(id))?.as_ref()?.get(id)
    }

    /// The kind of digest the originals of `id` are to be compared in: that
    /// of its first decision when that one carries a digest (a decision
    /// journaled with a SHA-256 digest keeps binding to the SHA-256 of the
    /// result), else the kind new decisions use.
    pub fn digest_kind(&self, id: &str) -> DigestKind {
        self.get(id)
            .and_then(|d| d.digest.kind())
            .unwrap_or(Digest::NEW)
    }

    /// The fate of the result `id` whose original has `digest`. A decision
    /// belongs to the original it was made on: the same id with other
    /// content is fresh (PROTOCOL.md 10.1). [`Digest::ANY`] on either side
    /// matches the id's first decision, and so does a digest of another
    /// kind than the first decision's: callers digest an id's originals in
    /// [`Self::digest_kind`], so two kinds only meet when a journal read
    /// back names, in its old kind, an original already taken in from a
    /// message before it; nothing then tells the two apart.
    ///
    /// A first decision without a digest (an inherited replacement, a
    /// record written before digests) is *unbound*: it stands for the first
    /// original met for its id afterwards (PROTOCOL.md 11.1), so it answers
    /// any original until [`Self::commit_decisions`] binds it to one.
    pub fn fate(&self, id: &str, digest: Digest) -> Fate<'_> {
        let Some(first) = self.get(id) else {
            return Fate::Fresh;
        };
        if first.digest == digest
            || digest == Digest::ANY
            || (first.digest != Digest::ANY && first.digest.kind() != digest.kind())
        {
            return fate_of(&first.replacement);
        }
        if !self.reused.is_empty()
            && let Some(r) = self.reused.get(&(Id::from(id), digest))
        {
            return fate_of(r);
        }
        if first.digest == Digest::ANY {
            return fate_of(&first.replacement);
        }
        Fate::Fresh
    }

    /// Whether the first decision on `id` still waits for its original: it
    /// came without one (see [`Self::fate`]).
    pub fn is_unbound(&self, id: &str) -> bool {
        self.get(id).is_some_and(|d| d.digest == Digest::ANY)
    }

    /// Whether the fate of the original `digest` of `id` is its first
    /// decision's (not a reused id's decision on another original), as
    /// [`Self::fate`] reads it.
    pub fn first_binds(&self, id: &str, digest: Digest) -> bool {
        let Some(first) = self.get(id) else {
            return false;
        };
        first.digest == digest
            || digest == Digest::ANY
            || (first.digest != Digest::ANY && first.digest.kind() != digest.kind())
            || (first.digest == Digest::ANY && !self.reused_has(&Id::from(id), digest))
    }

    /// Whether any original of `id` is decided.
    pub fn is_decided(&self, id: &str) -> bool {
        self.get(id).is_some()
    }

    /// Decisions made (an id reused with another original counts again).
    pub fn seen_count(&self) -> usize {
        self.seen_count
    }

    pub fn replacement_count(&self) -> usize {
        self.replacement_count
    }

    /// Decide originals, each with its replacement if it got one. An
    /// original already decided keeps its first fate: decisions are frozen
    /// forever.
    ///
    /// An unbound first decision (see [`Self::fate`]) is bound by the first
    /// original that comes for its id with a digest: a result met (no
    /// replacement of its own) or a record of the same replacement (the
    /// binding, journaled). It keeps its replacement and is frozen to that
    /// original from then on. A record of another replacement is a
    /// decision on another original.
    pub fn commit_decisions<I>(&mut self, decisions: I)
    where
        I: IntoIterator<Item = (Id, Digest, Option<Replacement>)>,
    {
        let decisions = decisions.into_iter();
        // A state read back takes thousands of decisions at once: its
        // tables are made at their size, not grown through every doubling.
        // No slack is added: the tables keep an eighth free of their own,
        // and a slack on top of it (a hint also counts an id's record and
        // its `seen` once each) doubled them past the size growth gives,
        // 5 MB more for a 100k-id session.
        let (many, _) = decisions.size_hint();
        if self.shards.is_empty() && many >= SHARDS * 64 {
            let per = many / SHARDS;
            self.shards = Arc::new(
                (0..SHARDS)
                    .map(|_| {
                        Some(Arc::new(Shard::with_capacity_and_hasher(
                            per,
                            IdHash::default(),
                        )))
                    })
                    .collect(),
            );
        }
        for (id, digest, replacement) in decisions {
            // An id met for the first time (nearly every one while a
            // session is read back) is decided here with one lookup: the
            // rules below all start from its first decision.
            let shard_ix = shard_of(&id);
            let known = self
                .shards
                .get(shard_ix)
                .and_then(Option::as_ref)
                .is_some_and(|shard| shard.contains_key(&*id));
            if !known {
                if replacement.is_some() {
                    self.replacement_count += 1;
                }
                self.seen_count += 1;
                let shards = Arc::make_mut(&mut self.shards);
                if shards.is_empty() {
                    shards.resize(SHARDS, None);
                }
                let shard = shards[shard_ix].get_or_insert_with(Default::default);
                Arc::make_mut(shard).insert(
                    id,
                    Decision {
                        digest,
                        replacement,
                    },
                );
                continue;
            }
            if digest != Digest::ANY && self.is_unbound(&id) && !self.reused_has(&id, digest) {
                let first = self.get(&id).and_then(|d| d.replacement.as_ref());
                if replacement.as_ref().is_none_or(|r| first == Some(r)) {
                    self.bind(&id, digest);
                    continue;
                }
                // Another replacement: a decision on another original,
                // kept apart below.
            } else if self.fate(&id, digest) != Fate::Fresh {
                continue;
            }
            if replacement.is_some() {
                self.replacement_count += 1;
            }
            self.seen_count += 1;
            if self.is_decided(&id) {
                Arc::make_mut(&mut self.reused).insert((id, digest), replacement);
                continue;
            }
            // Copy-on-write: the shard list and the one shard are cloned only
            // when a snapshot still shares them.
            let shards = Arc::make_mut(&mut self.shards);
            if shards.is_empty() {
                shards.resize(SHARDS, None);
            }
            let shard = shards[shard_of(&id)].get_or_insert_with(Default::default);
            Arc::make_mut(shard).insert(
                id,
                Decision {
                    digest,
                    replacement,
                },
            );
        }
    }

    fn reused_has(&self, id: &Id, digest: Digest) -> bool {
        !self.reused.is_empty() && self.reused.contains_key(&(id.clone(), digest))
    }

    /// Tie the unbound first decision on `id` to the original `digest`.
    fn bind(&mut self, id: &str, digest: Digest) {
        let shards = Arc::make_mut(&mut self.shards);
        if let Some(Some(shard)) = shards.get_mut(shard_of(id))
            && let Some(decision) = Arc::make_mut(shard).get_mut(id)
        {
            decision.digest = digest;
        }
    }

    /// Clear originals sent whole until now (PROTOCOL.md 11.3): each one
    /// whose fate is frozen gets its replacement, and keeps it forever
    /// after. Fresh or already replaced originals are left alone (a
    /// clearing never takes back a decision, it only ends sending an old
    /// result whole). Returns how many were cleared.
    pub fn clear<I>(&mut self, clearings: I) -> usize
    where
        I: IntoIterator<Item = (Id, Digest, Replacement)>,
    {
        let mut cleared = 0;
        for (id, digest, replacement) in clearings {
            if self.fate(&id, digest) != Fate::Frozen {
                continue;
            }
            cleared += 1;
            self.replacement_count += 1;
            // The frozen fate is the first decision's when that one binds
            // this original (see `fate`), else a reused id's.
            if self.first_binds(&id, digest) {
                let shards = Arc::make_mut(&mut self.shards);
                if let Some(Some(shard)) = shards.get_mut(shard_of(&id))
                    && let Some(decision) = Arc::make_mut(shard).get_mut(&id)
                {
                    decision.replacement = Some(replacement);
                }
            } else {
                Arc::make_mut(&mut self.reused).insert((id, digest), Some(replacement));
            }
        }
        cleared
    }

    /// Each shard's first decisions, shard by shard (the index
    /// [`Restore::shard`] takes), for saving the state whole.
    pub fn shards_saved(
        &self,
    ) -> impl Iterator<
        Item = (
            usize,
            impl ExactSizeIterator<Item = (&Id, Digest, Option<&Replacement>)>,
        ),
    > {
        self.shards.iter().enumerate().filter_map(|(ix, shard)| {
            let shard = shard.as_ref()?;
            Some((
                ix,
                shard
                    .iter()
                    .map(|(k, v)| (k, v.digest, v.replacement.as_ref())),
            ))
        })
    }

    /// The decisions on further originals of ids decided before, for
    /// saving the state whole ([`Restore::reused`]).
    pub fn reused_saved(
        &self,
    ) -> impl ExactSizeIterator<Item = (&Id, Digest, Option<&Replacement>)> {
        self.reused.iter().map(|((k, d), r)| (k, *d, r.as_ref()))
    }

    /// Every decided id with its first decision's replacement.
    pub fn iter(&self) -> impl Iterator<Item = (&Id, Option<&Replacement>)> {
        self.shards
            .iter()
            .flatten()
            .flat_map(|shard| shard.iter().map(|(k, v)| (k, v.replacement.as_ref())))
    }

    /// Every decision with the digest of its original, reused ids included.
    pub fn decisions(&self) -> impl Iterator<Item = (&Id, Digest, Option<&Replacement>)> {
        self.decisions_tagged().map(|(k, d, r, _)| (k, d, r))
    }

    /// [`Self::decisions`], each tagged with whether it is a decision on a
    /// further original of an id decided before (`true`): every first
    /// decision comes before those.
    pub fn decisions_tagged(
        &self,
    ) -> impl Iterator<Item = (&Id, Digest, Option<&Replacement>, bool)> {
        self.shards
            .iter()
            .flatten()
            .flat_map(|shard| {
                shard
                    .iter()
                    .map(|(k, v)| (k, v.digest, v.replacement.as_ref(), false))
            })
            .chain(
                self.reused
                    .iter()
                    .map(|((k, d), r)| (k, *d, r.as_ref(), true)),
            )
    }
}

/// A state taken back whole from what [`ReplacementState::shards_saved`]
/// and [`ReplacementState::reused_saved`] gave (a decisions checkpoint):
/// each shard is made at its final size and filled with ids known to be
/// distinct and to belong to it, so an id is hashed once and never looked
/// up before it is inserted. Reading a session back this way costs a
/// fraction of deciding its ids one by one.
pub struct Restore {
    shards: Vec<Option<Arc<Shard>>>,
    reused: Reused,
    seen_count: usize,
    replacement_count: usize,
}

impl Restore {
    /// Shards a saved state must have been saved with to be taken back.
    pub const SHARDS: usize = SHARDS;

    pub fn new() -> Self {
        Restore {
            shards: vec![None; SHARDS],
            reused: Reused::default(),
            seen_count: 0,
            replacement_count: 0,
        }
    }

    /// Make shard `ix` for `n` decisions; `None` if there is no such shard
    /// or it was made already.
    pub fn shard(&mut self, ix: usize, n: usize) -> Option<RestoreShard<'_>> {
        let slot = self.shards.get_mut(ix)?;
        if slot.is_some() {
            return None;
        }
        let shard = Arc::new(Shard::with_capacity_and_hasher(n, IdHash::default()));
        let shard = Arc::get_mut(slot.insert(shard))?;
        Some(RestoreShard {
            shard,
            seen_count: &mut self.seen_count,
            replacement_count: &mut self.replacement_count,
        })
    }

    /// A decision on a further original of an id decided before; `false`
    /// when that original was decided already.
    pub fn reused(&mut self, id: Id, digest: Digest, replacement: Option<Replacement>) -> bool {
        self.seen_count += 1;
        self.replacement_count += usize::from(replacement.is_some());
        self.reused.insert((id, digest), replacement).is_none()
    }

    pub fn finish(self) -> ReplacementState {
        let empty = self
            .shards
            .iter()
            .all(|s| s.as_ref().is_none_or(|s| s.is_empty()));
        ReplacementState {
            // A state with nothing decided has no shards at all, as a new one.
            shards: Arc::new(if empty { Vec::new() } else { self.shards }),
            reused: Arc::new(self.reused),
            seen_count: self.seen_count,
            replacement_count: self.replacement_count,
        }
    }
}

impl Default for Restore {
    fn default() -> Self {
        Self::new()
    }
}

/// One shard of a [`Restore`] being filled.
pub struct RestoreShard<'a> {
    shard: &'a mut Shard,
    seen_count: &'a mut usize,
    replacement_count: &'a mut usize,
}

impl RestoreShard<'_> {
    /// The first decision on `id`; `false` when `id` was given already.
    pub fn insert(&mut self, id: Id, digest: Digest, replacement: Option<Replacement>) -> bool {
        *self.seen_count += 1;
        *self.replacement_count += usize::from(replacement.is_some());
        self.shard
            .insert(
                id,
                Decision {
                    digest,
                    replacement,
                },
            )
            .is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(text: &str) -> Option<Replacement> {
        Some(Replacement::new(text))
    }

    #[test]
    fn first_decision_wins_and_clones_are_independent() {
        let mut state = ReplacementState::default();
        let any = Digest::ANY;
        state.commit_decisions([("a".into(), any, r("A")), ("b".into(), any, None)]);
        let snapshot = state.clone();
        state.commit_decisions([("a".into(), any, None), ("c".into(), any, r("C"))]);
        match state.fate("a", any) {
            Fate::Replaced(rep) => assert_eq!(rep.text(), "A"),
            other => panic!("{other:?}"),
        }
        assert_eq!(state.fate("b", any), Fate::Frozen);
        assert_eq!(state.replacement_count(), 2);
        assert_eq!(snapshot.fate("c", any), Fate::Fresh);
        assert_eq!(snapshot.seen_count(), 2);
    }

    #[test]
    fn snapshots_keep_their_view_while_the_live_state_grows() {
        let mut live = ReplacementState::default();
        let mut snapshots = Vec::new();
        for round in 0..20 {
            live.commit_decisions((0..500).map(|i| {
                let id: Id = format!("r{round}-{i}").into();
                let rep = (i % 7 == 0).then(|| Replacement::new(&id));
                (id, Digest::ANY, rep)
            }));
            snapshots.push((live.clone(), (round + 1) * 500));
        }
        for (snap, seen) in &snapshots {
            assert_eq!(snap.seen_count(), *seen);
            assert_eq!(snap.iter().count(), *seen);
            assert_eq!(
                snap.iter().filter(|(_, r)| r.is_some()).count(),
                snap.replacement_count()
            );
        }
        let any = Digest::ANY;
        assert_eq!(snapshots[0].0.fate("r1-0", any), Fate::Fresh);
        assert!(matches!(live.fate("r19-7", any), Fate::Replaced(r) if r.text() == "r19-7"));
        assert_eq!(live.fate("r19-8", any), Fate::Frozen);
    }

    #[test]
    fn a_decision_belongs_to_its_original() {
        let one = Digest::of_value(&serde_json::json!("first original"));
        let two = Digest::of_value(&serde_json::json!("second original"));
        let mut state = ReplacementState::default();
        state.commit_decisions([("x".into(), one, r("preview of one"))]);
        assert!(matches!(state.fate("x", one), Fate::Replaced(_)));
        assert_eq!(state.fate("x", two), Fate::Fresh);
        state.commit_decisions([("x".into(), two, None)]);
        assert_eq!(state.fate("x", two), Fate::Frozen);
        assert!(matches!(state.fate("x", one), Fate::Replaced(_)));
        assert_eq!(state.seen_count(), 2);
        assert_eq!(state.decisions().count(), 2);
    }

    /// PROTOCOL.md 11.1: a decision that came without its original binds
    /// to the first original met (a result, or a record of the same
    /// replacement) and is frozen to it; a record of another replacement
    /// is a decision apart.
    #[test]
    fn an_unbound_decision_binds_to_the_first_original_met() {
        let [one, two, three] =
            ["one", "two", "three"].map(|t| Digest::of_value(&serde_json::json!(t)));
        let mut state = ReplacementState::default();
        state.commit_decisions([("x".into(), Digest::ANY, r("P"))]);
        assert!(state.is_unbound("x"));
        assert!(matches!(state.fate("x", one), Fate::Replaced(p) if p.text() == "P"));
        assert!(matches!(state.fate("x", two), Fate::Replaced(_)));
        state.commit_decisions([("x".into(), one, None)]);
        assert!(!state.is_unbound("x"));
        assert!(matches!(state.fate("x", one), Fate::Replaced(p) if p.text() == "P"));
        assert_eq!(state.fate("x", two), Fate::Fresh);
        assert_eq!((state.seen_count(), state.replacement_count()), (1, 1));
        // Read back from a journal: the old record, then the binding.
        let mut journal = ReplacementState::default();
        journal.commit_decisions([("x".into(), Digest::ANY, r("P")), ("x".into(), one, r("P"))]);
        assert_eq!(
            journal.decisions().map(|(_, d, _)| d).collect::<Vec<_>>(),
            [one]
        );
        // A record of another replacement decides another original.
        journal.commit_decisions([
            ("y".into(), Digest::ANY, r("Q")),
            ("y".into(), three, r("R")),
        ]);
        assert!(journal.is_unbound("y"));
        assert!(matches!(journal.fate("y", three), Fate::Replaced(p) if p.text() == "R"));
        assert!(matches!(journal.fate("y", two), Fate::Replaced(p) if p.text() == "Q"));
    }

    #[test]
    fn replacements_round_trip_exactly_and_know_their_sizes() {
        let text = "<persisted-output>\n\u{1F600} é\n".repeat(50);
        let rep = Replacement::new(&text);
        assert_eq!(rep.text(), text);
        assert_eq!(rep.size(SizeUnit::Chars), SizeUnit::Chars.len(&text));
        assert_eq!(rep.size(SizeUnit::Utf16), SizeUnit::Utf16.len(&text));
        assert_eq!(rep.size(SizeUnit::Bytes), text.len() as u64);
        assert!(rep.packed_len() < text.len() / 4);
        assert_eq!(Replacement::new("").text(), "");
    }
}
