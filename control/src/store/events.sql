-- Notifications: events, and the webhooks they are delivered to, migration 13.

-- What happened, in order: written in the transaction of the change that caused it, so a
-- change committed always has its event and a change rolled back never does. Kept 30 days.
CREATE TABLE events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at      INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    -- What it is about (`user 12`, `node 3`), as the audit log names it.
    subject TEXT NOT NULL,
    -- A JSON object, never a secret.
    data    TEXT NOT NULL
) STRICT;

-- Where the owner has events sent: a URL, the kinds it takes (comma-separated; `user.*`,
-- `*`), and the secret each delivery is signed with (sealed under the master key).
CREATE TABLE webhooks (
    id         INTEGER PRIMARY KEY,
    url        TEXT NOT NULL,
    events     TEXT NOT NULL,
    secret_enc BLOB NOT NULL,
    created    INTEGER NOT NULL
) STRICT;

-- One event for one webhook, queued with the event: sent in order per webhook, retried with
-- backoff for a day, then failed (and the next goes).
CREATE TABLE deliveries (
    id         INTEGER PRIMARY KEY,
    webhook_id INTEGER NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id   INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    state      TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts   INTEGER NOT NULL DEFAULT 0,
    queued     INTEGER NOT NULL,
    next_at    INTEGER NOT NULL,
    done_at    INTEGER NOT NULL DEFAULT 0,
    -- The last answer's HTTP status (0: none came) and its first bytes, or why none came.
    status     INTEGER NOT NULL DEFAULT 0,
    answer     TEXT NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX deliveries_queue ON deliveries (state, webhook_id, id);
CREATE INDEX deliveries_of_webhook ON deliveries (webhook_id, id);
CREATE INDEX deliveries_of_event ON deliveries (event_id);

-- What was told already, so each crossing is told once: the quota share a user was warned
-- at (0, 80 or 95), since when a node is told offline, since when an edge is told failing.
ALTER TABLE users ADD COLUMN quota_warned INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN offline_told INTEGER NOT NULL DEFAULT 0;
ALTER TABLE edges ADD COLUMN failing_told INTEGER NOT NULL DEFAULT 0;
