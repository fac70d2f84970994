//! The shared backend as a session sees it: a session's transcript is its
//! commits in a [`SharedStore`] (PostgreSQL), read back on every request so
//! each request sees what every replica committed before it.

use std::sync::Arc;

use super::{Append, Decision, ForkSource, Outcome, SessionStore, SharedStore, WithPair};
use super::{Loaded, SessionKey};
use crate::error::{Error, Result};
use crate::transcript::Lines;
use crate::transcript::guard::{PairGuard, Pending, Transition};
use crate::transcript::reader::{self, SessionImage};
use crate::transcript::{ReplacementRecord, SeenLine};

/// Sessions in `db`.
pub struct Shared<'a> {
    pub db: &'a dyn SharedStore,
}

impl Shared<'_> {
    /// Read what other replicas committed since this one last read (the
    /// whole session on first use) and apply it: a request sees every
    /// commit made before it started, whichever replica made it.
    async fn refresh(&self, key: &SessionKey, loaded: &mut Loaded) -> Result<bool> {
        let mut read = self
            .db
            .read_with_pair(key.id.as_str(), loaded.shared_seq)
            .await?;
        // gc removed the session this replica knew (possibly made again
        // since, by a later commit): its decisions and their saved outputs
        // are gone, so nothing of it may be replayed. Start over from what
        // the database holds now; a result met again is decided afresh.
        // (Only when the loaded hold was lost with its connection: while
        // held, gc leaves the session alone.)
        let removed = loaded
            .incarnation
            .is_some_and(|known| read.as_ref().is_none_or(|r| r.incarnation != known));
        if removed {
            tracing::warn!(session = %key.id, "the session was removed by gc since it was read; starting it afresh");
            *loaded = Loaded {
                journaled: true,
                hold: loaded.hold.take(),
                ..Loaded::default()
            };
            if read.is_some() {
                read = self.db.read_with_pair(key.id.as_str(), 0).await?;
            }
        }
        let Some(WithPair {
            commits,
            pair,
            incarnation,
        }) = read
        else {
            return Ok(removed);
        };
        loaded.incarnation = Some(incarnation);
        loaded.exists = true;
        if pair != loaded.pair_row {
            set_pair(loaded, pair)?;
        }
        let Some(last) = commits.last().map(|c| c.seq) else {
            return Ok(true);
        };
        let bytes: Vec<u8> = commits.into_iter().flat_map(|c| c.lines).collect();
        let format = *loaded
            .format
            .get_or_insert_with(|| reader::detect_format(&bytes));
        let mut image = SessionImage::default();
        reader::read_lines(
            format,
            std::io::Cursor::new(&bytes),
            reader::ReadLimits::default(),
            || false,
            |span, entry| image.add(span, entry),
        )
        .map_err(|err| Error::Internal(format!("reading shared commits: {err}")))?;
        // Every commit is whole: a call without its results is taken as
        // it stands, never cut.
        image.finish_lenient();
        loaded.state.commit_decisions(image.decisions());
        loaded.state.clear(image.cleared.iter().cloned());
        loaded.state.clear(image.cleared.iter().cloned());
        for (id, name) in image.undecided_names {
            if !loaded.state.is_decided(&id) {
                loaded.tool_names.insert_mut(id, name);
            }
        }
        let decided: Vec<crate::state::Id> = loaded
            .tool_names
            .keys()
            .filter(|id| loaded.state.is_decided(id))
            .cloned()
            .collect();
        for id in decided {
            loaded.tool_names.remove_mut(&*id);
        }
        loaded.shared_seq = last;
        Ok(true)
    }
}

/// Take `row` as the session's pending pair: the guard holds it, and the
/// names of its calls are known for `exemptTools` as on the replica that
/// buffered them.
fn set_pair(loaded: &mut Loaded, row: Option<Vec<u8>>) -> Result<()> {
    let pending: Option<Pending> = match &row {
        Some(bytes) => Some(
            crate::json::from_slice(bytes).map_err(|err| Error::Storage {
                message: format!("postgres: the pending pair of this session is unreadable: {err}"),
                path: None,
            })?,
        ),
        None => None,
    };
    for (id, name) in pending.iter().flat_map(|p| &p.calls) {
        if !loaded.state.is_decided(id) {
            loaded
                .tool_names
                .insert_mut(crate::state::keep_id(id), Arc::from(name.as_str()));
        }
    }
    loaded.guard = PairGuard::holding(pending);
    loaded.pair_row = row;
    Ok(())
}

impl SessionStore for Shared<'_> {
    async fn load(&self, key: &SessionKey, loaded: &mut Option<Loaded>) -> Result<bool> {
        let loaded = match loaded {
            Some(loaded) => loaded,
            None => {
                // Held before the first read: gc either removed the
                // session before it (this replica reads what is there
                // now) or leaves it alone until the session is unloaded.
                let hold = self.db.hold_loaded(key.id.as_str()).await?;
                loaded.insert(Loaded {
                    journaled: true,
                    hold: Some(hold),
                    ..Loaded::default()
                })
            }
        };
        self.refresh(key, loaded).await
    }

    async fn commit(
        &self,
        key: &SessionKey,
        loaded: &mut Loaded,
        lines: Lines,
        _fsync: bool,
        create: bool,
    ) -> Result<Outcome> {
        if !loaded.exists && !create {
            return Ok(Outcome::NOTHING);
        }
        let format = *loaded.format.get_or_insert_default();
        if lines.is_empty() && loaded.exists {
            return Ok(Outcome::WRITTEN);
        }
        let append = Append {
            header: crate::transcript::session_line(format),
            lines: lines.bytes,
            decisions: Vec::new(),
        };
        self.db.append(key.id.as_str(), append).await?;
        // Read back this commit and any other replica's.
        self.refresh(key, loaded).await?;
        loaded.exists = true;
        Ok(Outcome {
            done: true,
            reread: true,
        })
    }

    async fn journal(
        &self,
        key: &SessionKey,
        loaded: &mut Loaded,
        records: &[ReplacementRecord],
        seen: &SeenLine,
        _fsync: bool,
    ) -> Result<Outcome> {
        let format = *loaded.format.get_or_insert_default();
        let decisions = records
            .iter()
            .map(|r| Decision {
                tool_use_id: r.tool_use_id.clone(),
                digest: r.digest.clone(),
                replacement: Some(r.replacement.clone()),
                cleared: r.cleared,
            })
            .chain(
                seen.tool_use_ids
                    .iter()
                    .enumerate()
                    .map(|(i, id)| Decision {
                        tool_use_id: id.clone(),
                        digest: seen.digests.get(i).cloned().filter(|d| !d.is_empty()),
                        replacement: None,
                        cleared: false,
                    }),
            )
            .collect();
        let append = Append {
            header: crate::transcript::session_line(format),
            lines: Vec::new(),
            decisions,
        };
        self.db.append(key.id.as_str(), append).await?;
        self.refresh(key, loaded).await?;
        Ok(Outcome {
            done: true,
            reread: true,
        })
    }

    async fn fork(&self, target: &SessionKey, source: ForkSource) -> Result<Option<Loaded>> {
        // The fork reads the source's commits up to now instead of copying
        // them; the target reads itself back.
        self.db
            .fork(source.parent.as_str(), target.id.as_str())
            .await?;
        Ok(None)
    }

    async fn commit_pair(
        &self,
        key: &SessionKey,
        loaded: &mut Loaded,
        lines: Lines,
        transition: Transition,
        _fsync: bool,
    ) -> Result<bool> {
        let mut next = loaded.guard.clone();
        next.apply(transition);
        let row = next
            .pending()
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|err| Error::Internal(format!("encoding the pending pair: {err}")))?;
        let format = *loaded.format.get_or_insert_default();
        let append = Append {
            header: crate::transcript::session_line(format),
            lines: lines.bytes,
            decisions: Vec::new(),
        };
        let expected = loaded.pair_row.clone();
        if !self
            .db
            .append_pair(key.id.as_str(), append, expected, row.clone())
            .await?
        {
            return Ok(false);
        }
        loaded.guard = next;
        loaded.pair_row = row;
        // Read back this commit and any other replica's.
        self.refresh(key, loaded).await?;
        loaded.exists = true;
        Ok(true)
    }

    fn shared_by_replicas(&self) -> bool {
        true
    }

    async fn collect(&self, gc: super::Collect) -> Result<crate::retention::GcReport> {
        self.db
            .collect(&gc.data_dir, gc.objects, &gc.policy, gc.dry_run)
            .await
    }
}
