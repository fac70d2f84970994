//! What a store works on: a session's key, the storage a process writes
//! through, and a session's contents once loaded.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rpds::HashTrieMapSync;

use super::SharedStore;
use crate::artifact::ArtifactStore;
use crate::format::Format;
use crate::state::ReplacementState;
use crate::transcript::SessionId;
use crate::transcript::guard::PairGuard;
use crate::transcript::writer::{self, LogFileFactory, TranscriptWriter};

/// Sessions are told apart by data directory and id: two clients with
/// different `dataDir`s never share a session by accident.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionKey {
    pub data_dir: PathBuf,
    pub id: SessionId,
}

/// A session key's parts, borrowed: the tables keyed by [`SessionKey`]
/// are searched with `&(data_dir, id) as &dyn KeyParts`, so a lookup on
/// every request builds (allocates, then frees) no key.
pub trait KeyParts {
    fn parts(&self) -> (&Path, &SessionId);
}

impl KeyParts for SessionKey {
    fn parts(&self) -> (&Path, &SessionId) {
        (&self.data_dir, &self.id)
    }
}

impl KeyParts for (&Path, &SessionId) {
    fn parts(&self) -> (&Path, &SessionId) {
        (self.0, self.1)
    }
}

impl<'a> Borrow<dyn KeyParts + 'a> for SessionKey {
    fn borrow(&self) -> &(dyn KeyParts + 'a) {
        self
    }
}

// One hash and one equality for the key and its borrowed parts, as a
// table searched by the parts requires. The hash is the id's alone: equal
// keys have equal ids, so it agrees with equality, and a path hashes a
// component at a time (a tenth of a small request's table lookups); keys
// of one id in several data directories share a hash and are told apart
// by equality, and a process serves few data directories.
impl Hash for dyn KeyParts + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.parts().1.hash(state);
    }
}

impl PartialEq for dyn KeyParts + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn KeyParts + '_ {}

/// A table of sessions: every request looks one up, and SipHash of a data
/// directory's path was a visible part of a small request's cost.
pub type SessionTable<V> = std::collections::HashMap<SessionKey, V, crate::state::IdHash>;

impl Hash for SessionKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self as &dyn KeyParts).hash(state);
    }
}

impl SessionKey {
    pub fn transcript_path(&self) -> PathBuf {
        self.data_dir
            .join("sessions")
            .join(format!("{}.jsonl", self.id))
    }

    pub fn session_dir(&self) -> PathBuf {
        self.data_dir.join("sessions").join(self.id.as_str())
    }

    pub fn artifact_dir(&self) -> PathBuf {
        crate::artifact::session_dir(&self.data_dir, self.id.as_str())
    }
}

/// Where bytes go; swapped for fault-injecting versions in tests.
pub struct Storage {
    pub artifacts: Arc<dyn ArtifactStore>,
    pub files: Arc<dyn LogFileFactory>,
    /// Session state and transcripts shared by replicas
    /// (`storage.backend = "postgres"`); `None`: transcript files.
    pub shared: Option<Arc<dyn SharedStore>>,
}

impl Default for Storage {
    fn default() -> Self {
        Storage {
            artifacts: Arc::new(crate::artifact::FsArtifactStore),
            files: Arc::new(writer::PlainFiles),
            shared: None,
        }
    }
}

impl Storage {
    /// The backend sessions load, commit, fork and collect through.
    pub fn store(&self) -> super::Store<'_> {
        match &self.shared {
            Some(db) => super::Store::Shared(super::shared::Shared { db: &**db }),
            None => super::Store::Local(super::local::Local { files: &self.files }),
        }
    }
}

/// A session's contents once read from disk.
#[derive(Default)]
pub struct Loaded {
    /// Whether the session has come into being (PROTOCOL.md section 5).
    pub exists: bool,
    pub state: ReplacementState,
    /// Tool name of each committed tool_use whose result is not decided yet
    /// (for `exemptTools`; a decided id's name no longer matters).
    pub tool_names: HashTrieMapSync<crate::state::Id, Arc<str>>,
    pub transcript: Option<Arc<Mutex<TranscriptWriter>>>,
    pub guard: PairGuard,
    /// The provider format, fixed when the session came into being
    /// (PROTOCOL.md 10.3); `None` until then.
    pub format: Option<Format>,
    /// Whether loading the session from disk again would give back exactly
    /// this: true once loaded from its transcript, kept by every change
    /// that journals itself before it takes effect, false after a change
    /// that lives only in memory (`state/reconstruct`, a fork target).
    pub journaled: bool,
    /// On a shared store: the last commit read.
    pub shared_seq: i64,
    /// On a shared store: the session's pending pair as last read or
    /// written there (its JSON bytes), which `guard` holds.
    pub pair_row: Option<Vec<u8>>,
    /// On a shared store: the incarnation of the session last read (gc
    /// removed the one it knew when another is found).
    pub incarnation: Option<i64>,
    /// On a shared store: keeps gc off the session while it is loaded.
    pub hold: Option<super::postgres::LoadedHold>,
}

impl Loaded {
    /// Whether dropping this from memory loses nothing: no pair pending
    /// (a pending pair is never on disk, by the pair invariant), and
    /// either the transcript holds all of it, or there is no transcript
    /// and nothing decided or named. Such a session with nothing in it
    /// loses only having come into being and its format, as it does on a
    /// restart: its next request starts it again.
    pub fn reloadable(&self) -> bool {
        // A shared store holds the pending pair too.
        (self.guard.pending().is_none() || self.pair_row.is_some())
            && match self.transcript {
                Some(_) => self.journaled,
                // On a shared store the database holds what was read.
                None => self.is_blank() || (self.shared_seq > 0 && self.journaled),
            }
    }

    fn is_blank(&self) -> bool {
        self.state.seen_count() == 0 && self.tool_names.is_empty()
    }

    /// Whether what lives only in memory can be journaled as it stands: a
    /// state of decisions without a transcript (a reconstructed session, a
    /// fork without its transcript) becomes a new transcript of
    /// `replacement` and `seen` lines, which loads back as the same state.
    /// Tool names of calls not answered yet have no line of their own.
    pub fn journalable(&self) -> bool {
        self.guard.pending().is_none() && self.transcript.is_none() && self.tool_names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table keyed by whole keys finds each by its borrowed parts, and
    /// only it: the parts hash and compare as the key does, spellings of
    /// one path included.
    #[test]
    fn a_key_is_found_by_its_parts() {
        let id = |s: &str| SessionId::try_from(s.to_string()).unwrap();
        let mut table: SessionTable<u32> = Default::default();
        let key = |dir: &str, s: &str| SessionKey {
            data_dir: PathBuf::from(dir),
            id: id(s),
        };
        table.insert(key("/data/a", "s-1"), 1);
        table.insert(key("/data/b", "s-1"), 2);
        table.insert(key("/data/a", "s-2"), 3);
        let find = |dir: &str, s: &str| {
            let s = id(s);
            table.get(&(Path::new(dir), &s) as &dyn KeyParts).copied()
        };
        assert_eq!(find("/data/a", "s-1"), Some(1));
        assert_eq!(find("/data/b", "s-1"), Some(2));
        assert_eq!(find("/data/a", "s-2"), Some(3));
        assert_eq!(find("/data//a/", "s-1"), Some(1));
        assert_eq!(find("/data/c", "s-1"), None);
        assert_eq!(find("/data/a", "s-3"), None);
    }
}
