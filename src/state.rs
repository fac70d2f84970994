//! Per-session replacement state: which tool_use ids have their fate
//! decided, and the exact replacement string of those that were replaced.
//!
//! Both sets live in one persistent map from id to `Option<replacement>`, so
//! "an id has a replacement only if it is seen" holds by construction, and a
//! snapshot (a fork, a `state/get`) is an O(1) clone that shares structure
//! with the live state.

use std::sync::Arc;

use rpds::HashTrieMapSync;

#[derive(Clone, Default)]
pub struct ReplacementState {
    decided: HashTrieMapSync<Arc<str>, Option<Arc<str>>>,
    replacement_count: usize,
}

/// What the state knows of one id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate<'a> {
    Fresh,
    Frozen,
    Replaced(&'a Arc<str>),
}

impl ReplacementState {
    pub fn fate(&self, id: &str) -> Fate<'_> {
        match self.decided.get(id) {
            None => Fate::Fresh,
            Some(None) => Fate::Frozen,
            Some(Some(r)) => Fate::Replaced(r),
        }
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
        I: IntoIterator<Item = (Arc<str>, Option<Arc<str>>)>,
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

    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, Option<&Arc<str>>)> {
        self.decided.iter().map(|(k, v)| (k, v.as_ref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_decision_wins_and_clones_are_independent() {
        let mut state = ReplacementState::default();
        state.commit_decisions([("a".into(), Some("A".into())), ("b".into(), None)]);
        let snapshot = state.clone();
        state.commit_decisions([("a".into(), None), ("c".into(), Some("C".into()))]);
        assert_eq!(state.fate("a"), Fate::Replaced(&Arc::from("A")));
        assert_eq!(state.fate("b"), Fate::Frozen);
        assert_eq!(state.replacement_count(), 2);
        assert_eq!(snapshot.fate("c"), Fate::Fresh);
        assert_eq!(snapshot.seen_count(), 2);
    }
}
