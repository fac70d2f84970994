-- Pending pairs of `pair/append` (storage.backend = "postgres").
--
-- An assistant turn's tool calls wait here, with the results that came so
-- far, until the last result commits the whole pair: so a session's calls
-- may be appended on one replica and its results on others. One row per
-- session with a pair pending, holding the pair as JSON bytes (the
-- messages as received, the calls, the ids still outstanding, the
-- connection that buffered it). A replica plans its step from the row it
-- read and writes under the session's advisory lock only if the row is
-- still that one, in the same transaction as the step's commit: the last
-- result commits calls and results as one commit and deletes the row, so
-- two replicas racing it commit once.
CREATE TABLE IF NOT EXISTS toolwire_pending_pairs (
    session text PRIMARY KEY REFERENCES toolwire_sessions (session) ON DELETE CASCADE,
    pair    bytea NOT NULL
);
