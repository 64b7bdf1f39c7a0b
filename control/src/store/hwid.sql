-- Devices registered by the headers apps send when they fetch a link (HWID), migration 11.

-- Every device an edge (or control, serving links itself) registered for a user, merged
-- from the edges' registries: first and last fetch over all of them.
CREATE TABLE hwid_devices (
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    key        BLOB NOT NULL CHECK (length(key) = 16),
    os         TEXT NOT NULL,
    os_version TEXT NOT NULL,
    model      TEXT NOT NULL,
    app        TEXT NOT NULL,
    first_seen INTEGER NOT NULL,
    last_seen  INTEGER NOT NULL,
    PRIMARY KEY (user_id, key)
) STRICT, WITHOUT ROWID;

-- Devices the owner deleted: the user's snapshot tells the edges to drop them (a device
-- registered at or before `before`), and registries that still list them are not believed.
CREATE TABLE hwid_forgotten (
    user_id INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    key     BLOB NOT NULL CHECK (length(key) = 16),
    before  INTEGER NOT NULL,
    PRIMARY KEY (user_id, key)
) STRICT, WITHOUT ROWID;

-- When an edge last turned a device of the user's away over the limit.
ALTER TABLE users ADD COLUMN hwid_refused_at INTEGER NOT NULL DEFAULT 0;
