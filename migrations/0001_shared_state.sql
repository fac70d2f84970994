-- Shared session state and transcripts (storage.backend = "postgres").
--
-- A session's transcript is its commits in `seq` order: each row holds the
-- complete transcript lines of one commit (a pair, a batch of decisions),
-- written in one transaction, so no reader ever sees half a pair. Commits of
-- one session are serialized by a transaction-scoped advisory lock on the
-- session id, so within a session `seq` order is commit order and a replica
-- that has read up to `seq` N has seen every commit numbered N or lower.
CREATE TABLE IF NOT EXISTS toolwire_sessions (
    session       text PRIMARY KEY,
    -- A fork reads its parent's commits up to `fork_seq`, then its own:
    -- the parent's rows are shared, never copied.
    parent        text REFERENCES toolwire_sessions (session),
    fork_seq      bigint,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_write_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS toolwire_commits (
    seq        bigserial PRIMARY KEY,
    session    text NOT NULL REFERENCES toolwire_sessions (session) ON DELETE CASCADE,
    lines      bytea NOT NULL
);
CREATE INDEX IF NOT EXISTS toolwire_commits_by_session ON toolwire_commits (session, seq);

-- The arbiter of decisions: the first replica to insert (session, tool-use
-- id, digest of the original) wins; the others read the winner back and
-- replay its exact bytes. `replacement` is NULL for a result sent whole.
-- Inserted in the same transaction as the commit that journals it. Ids and
-- replacements are UTF-8 bytes: a provider's id may hold a NUL, which a
-- PostgreSQL text value cannot.
CREATE TABLE IF NOT EXISTS toolwire_decisions (
    session     text NOT NULL REFERENCES toolwire_sessions (session) ON DELETE CASCADE,
    tool_use_id bytea NOT NULL,
    digest      text NOT NULL,
    replacement bytea,
    PRIMARY KEY (session, tool_use_id, digest)
);
