//! Per-session replacement state: which tool_use ids have their fate
//! decided, and the exact replacement string of those that were replaced.
//!
//! Both sets live in one map from id to `Option<replacement>`, so "an id
//! has a replacement only if it is seen" holds by construction. The map is
//! split into shards behind reference counts: a snapshot (a fork, the
//! published state readers see) is an O(1) clone that shares every shard,
//! and a later commit copies only the shards it touches. Measured against a
//! hash-trie (`rpds`), this holds 100,000 ids in about half the memory
//! (see README, "Benchmarks").
//!
//! Replacements are kept LZ4-compressed with their sizes precomputed in
//! every unit: a session holds thousands of ~2 KB previews, which would
//! otherwise dominate its memory, while a preview is only decompressed when
//! a message that carries it is rendered.

use std::sync::Arc;

use crate::config::SizeUnit;
use crate::format::Digest;

/// One replacement string, stored compactly.
pub struct Replacement {
    packed: Box<[u8]>,
    /// Length in chars, UTF-16 units and bytes.
    sizes: [u64; 3],
}

impl Replacement {
    pub fn new(text: &str) -> Self {
        Replacement {
            packed: compress(text.as_bytes()),
            sizes: [
                SizeUnit::Chars.len(text),
                SizeUnit::Utf16.len(text),
                SizeUnit::Bytes.len(text),
            ],
        }
    }

    /// The exact replacement string.
    pub fn text(&self) -> String {
        // The bytes were compressed from a `String` by `new`: they decode.
        lz4_flex::decompress_size_prepended(&self.packed)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .unwrap_or_default()
    }

    pub fn size(&self, unit: SizeUnit) -> u64 {
        match unit {
            SizeUnit::Chars => self.sizes[0],
            SizeUnit::Utf16 => self.sizes[1],
            SizeUnit::Bytes => self.sizes[2],
        }
    }

    /// Bytes of memory held for the text.
    pub fn packed_len(&self) -> usize {
        self.packed.len()
    }
}

impl std::fmt::Debug for Replacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Replacement").field(&self.text()).finish()
    }
}

impl PartialEq for Replacement {
    fn eq(&self, other: &Self) -> bool {
        self.sizes == other.sizes && self.text() == other.text()
    }
}

/// A decided id: the original it was decided on and its replacement.
#[derive(Clone)]
struct Decision {
    digest: Digest,
    replacement: Option<Arc<Replacement>>,
}

type Shard = std::collections::HashMap<Arc<str>, Decision>;

/// Decisions on further originals of ids already decided once (providers
/// that reuse call ids across turns); almost always empty.
type Reused = std::collections::HashMap<(Arc<str>, Digest), Option<Arc<Replacement>>>;

/// Shards per state: enough that a commit copies a few hundred entries at
/// 100,000 ids, few enough that an empty session costs 2 KB.
const SHARDS: usize = 256;

/// LZ4 block with its length prepended (the `lz4_flex` size-prepended
/// format), allocated at its exact size. Compressing straight into a fresh
/// worst-case buffer and shrinking it would leave a hole beside every live
/// replacement; a per-thread scratch buffer avoids that.
fn compress(input: &[u8]) -> Box<[u8]> {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SCRATCH.with_borrow_mut(|scratch| {
        let bound = 4 + lz4_flex::block::get_maximum_output_size(input.len());
        if scratch.len() < bound {
            scratch.resize(bound, 0);
        }
        scratch[..4].copy_from_slice(&(input.len() as u32).to_le_bytes());
        match lz4_flex::block::compress_into(input, &mut scratch[4..]) {
            Ok(n) => Box::from(&scratch[..4 + n]),
            // The scratch buffer is sized to the bound, so this cannot
            // happen; fall back to the allocating form all the same.
            Err(_) => lz4_flex::compress_prepend_size(input).into_boxed_slice(),
        }
    })
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
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    (BuildHasherDefault::<DefaultHasher>::default().hash_one(id) as usize) % SHARDS
}

/// What the state knows of one original.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fate<'a> {
    Fresh,
    Frozen,
    Replaced(&'a Arc<Replacement>),
}

fn fate_of(replacement: &Option<Arc<Replacement>>) -> Fate<'_> {
    match replacement {
        None => Fate::Frozen,
        Some(r) => Fate::Replaced(r),
    }
}

impl ReplacementState {
    fn get(&self, id: &str) -> Option<&Decision> {
        self.shards.get(shard_of(id))?.as_ref()?.get(id)
    }

    /// The fate of the result `id` whose original has `digest`. A decision
    /// belongs to the original it was made on: the same id with other
    /// content is fresh (PROTOCOL.md 10.1). [`Digest::ANY`] on either side
    /// matches the id's first decision.
    pub fn fate(&self, id: &str, digest: Digest) -> Fate<'_> {
        let Some(first) = self.get(id) else {
            return Fate::Fresh;
        };
        if first.digest == digest || first.digest == Digest::ANY || digest == Digest::ANY {
            return fate_of(&first.replacement);
        }
        if self.reused.is_empty() {
            return Fate::Fresh;
        }
        match self.reused.get(&(Arc::from(id), digest)) {
            Some(r) => fate_of(r),
            None => Fate::Fresh,
        }
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
    pub fn commit_decisions<I>(&mut self, decisions: I)
    where
        I: IntoIterator<Item = (Arc<str>, Digest, Option<Arc<Replacement>>)>,
    {
        for (id, digest, replacement) in decisions {
            if self.fate(&id, digest) != Fate::Fresh {
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

    /// Every decided id with its first decision's replacement.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, Option<&Arc<Replacement>>)> {
        self.shards
            .iter()
            .flatten()
            .flat_map(|shard| shard.iter().map(|(k, v)| (k, v.replacement.as_ref())))
    }

    /// Every decision with the digest of its original, reused ids included.
    pub fn decisions(
        &self,
    ) -> impl Iterator<Item = (&Arc<str>, Digest, Option<&Arc<Replacement>>)> {
        self.decisions_tagged().map(|(k, d, r, _)| (k, d, r))
    }

    /// [`Self::decisions`], each tagged with whether it is a decision on a
    /// further original of an id decided before (`true`): every first
    /// decision comes before those.
    pub fn decisions_tagged(
        &self,
    ) -> impl Iterator<Item = (&Arc<str>, Digest, Option<&Arc<Replacement>>, bool)> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn r(text: &str) -> Option<Arc<Replacement>> {
        Some(Arc::new(Replacement::new(text)))
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
                let id: Arc<str> = format!("r{round}-{i}").into();
                let rep = (i % 7 == 0).then(|| Arc::new(Replacement::new(&id)));
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

    #[test]
    fn replacements_round_trip_exactly_and_know_their_sizes() {
        let text = "<persisted-output>\n\u{1F600} é\n".repeat(50);
        let rep = Replacement::new(&text);
        assert_eq!(rep.text(), text);
        assert_eq!(rep.size(SizeUnit::Chars), SizeUnit::Chars.len(&text));
        assert_eq!(rep.size(SizeUnit::Utf16), SizeUnit::Utf16.len(&text));
        assert_eq!(rep.size(SizeUnit::Bytes), text.len() as u64);
        assert!(rep.packed_len() < text.len() / 4);
    }
}
