-- Which life of a session a replica read (storage.backend = "postgres").
--
-- gc removes a session as a unit, and a later commit may create it again
-- under the same id. A replica that had read the old one must not go on
-- replaying its decisions: their saved outputs went with it. Every row of
-- `toolwire_sessions` gets a number no earlier row had, so a replica that
-- finds another number than the one it read knows the session it knew is
-- gone and starts again from what the database holds now.
CREATE SEQUENCE IF NOT EXISTS toolwire_session_incarnations;
ALTER TABLE toolwire_sessions
    ADD COLUMN IF NOT EXISTS incarnation bigint NOT NULL
    DEFAULT nextval('toolwire_session_incarnations');
