//! Per-session replacement state: which tool_use ids have their fate
//! decided, and the exact replacement string of those that were replaced.
//!
//! Both sets live in one persistent map from id to `Option<replacement>`, so
//! "an id has a replacement only if it is seen" holds by construction, and a
//! snapshot (a fork, a `state/get`) is an O(1) clone that shares structure
//! with the live state.
//!
//! Replacements are kept LZ4-compressed with their sizes precomputed in
//! every unit: a session holds thousands of ~2 KB previews, which would
//! otherwise dominate its memory, while a preview is only decompressed when
//! a message that carries it is rendered.

use std::sync::Arc;

use rpds::HashTrieMapSync;

use crate::config::SizeUnit;

/// One replacement string, stored compactly.
pub struct Replacement {
    packed: Box<[u8]>,
    /// Length in chars, UTF-16 units and bytes.
    sizes: [u64; 3],
}

impl Replacement {
    pub fn new(text: &str) -> Self {
        Replacement {
            packed: lz4_flex::compress_prepend_size(text.as_bytes()).into_boxed_slice(),
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

#[derive(Clone, Default)]
pub struct ReplacementState {
    decided: HashTrieMapSync<Arc<str>, Option<Arc<Replacement>>>,
    replacement_count: usize,
}

/// What the state knows of one id.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fate<'a> {
    Fresh,
    Frozen,
    Replaced(&'a Arc<Replacement>),
}

impl ReplacementState {
    pub fn fate(&self, id: &str) -> Fate<'_> {
        match self.decided.get(id) {
            None => Fate::Fresh,
            Some(None) => Fate::Frozen,
            Some(Some(r)) => Fate::Replaced(r),
        }
    }

    pub fn is_decided(&self, id: &str) -> bool {
        self.decided.contains_key(id)
    }

    pub fn seen_count(&self) -> usize {
        self.decided.size()
    }

    pub fn replacement_count(&self) -> usize {
        self.replacement_count
    }

    /// Decide ids, each with its replacement if it got one. An id already
    /// decided keeps its first fate: decisions are frozen forever.
    pub fn commit_decisions<I>(&mut self, decisions: I)
    where
        I: IntoIterator<Item = (Arc<str>, Option<Arc<Replacement>>)>,
    {
        for (id, replacement) in decisions {
            if self.decided.contains_key(&*id) {
                continue;
            }
            if replacement.is_some() {
                self.replacement_count += 1;
            }
            self.decided.insert_mut(id, replacement);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, Option<&Arc<Replacement>>)> {
        self.decided.iter().map(|(k, v)| (k, v.as_ref()))
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
        state.commit_decisions([("a".into(), r("A")), ("b".into(), None)]);
        let snapshot = state.clone();
        state.commit_decisions([("a".into(), None), ("c".into(), r("C"))]);
        match state.fate("a") {
            Fate::Replaced(rep) => assert_eq!(rep.text(), "A"),
            other => panic!("{other:?}"),
        }
        assert_eq!(state.fate("b"), Fate::Frozen);
        assert_eq!(state.replacement_count(), 2);
        assert_eq!(snapshot.fate("c"), Fate::Fresh);
        assert_eq!(snapshot.seen_count(), 2);
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
