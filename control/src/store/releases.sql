-- Signed node releases and their rollouts (`hearth-control release`, /api/releases).

-- A release control can hand out: its signed manifest; the binaries are files in the data
-- directory (releases/<version>/<name>).
CREATE TABLE releases (
    -- The version of the release envelope (its signing time): unique and increasing.
    version  INTEGER PRIMARY KEY,
    -- The manifest's version, like 0.2.0.
    name     TEXT NOT NULL,
    built    INTEGER NOT NULL,
    expires  INTEGER NOT NULL,
    manifest BLOB NOT NULL,
    added    INTEGER NOT NULL
) STRICT;

-- A rollout: the canary node first, then the other nodes one at a time, stopping at the
-- first that fails.
CREATE TABLE rollouts (
    release  INTEGER PRIMARY KEY REFERENCES releases (version) ON DELETE CASCADE,
    state    TEXT NOT NULL CHECK (state IN ('canary', 'rolling', 'done', 'failed', 'stopped')),
    canary   INTEGER NOT NULL,
    -- The node told last, and since when.
    current  INTEGER NOT NULL,
    since    INTEGER NOT NULL,
    detail   TEXT NOT NULL DEFAULT '',
    started  INTEGER NOT NULL,
    updated  INTEGER NOT NULL
) STRICT;

-- The release each node is told to run (0: none), and what it last said about an update.
ALTER TABLE nodes ADD COLUMN release_target INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN update_status TEXT NOT NULL DEFAULT '';
-- The release a node says it runs (0: a build that came with no release).
ALTER TABLE nodes ADD COLUMN release_running INTEGER NOT NULL DEFAULT 0;
