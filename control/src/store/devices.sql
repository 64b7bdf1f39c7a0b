-- Fair use (devices, kicks, the abuse guard), migration 10.

-- A user's own device limit (NULL: its groups'; 0: none), its kick count (raised to close
-- its connections at the nodes' next pull), and what the nodes refused it, all told.
ALTER TABLE users ADD COLUMN device_limit INTEGER CHECK (device_limit >= 0);
ALTER TABLE users ADD COLUMN kick INTEGER NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN refused_devices INTEGER NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN devices_refused_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN refused_torrent INTEGER NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN refused_smtp INTEGER NOT NULL DEFAULT 0;

-- A group's default device limit (0: none) and abuse guard (off by default).
ALTER TABLE groups ADD COLUMN device_limit INTEGER NOT NULL DEFAULT 0 CHECK (device_limit >= 0);
ALTER TABLE groups ADD COLUMN block_torrent INTEGER NOT NULL DEFAULT 0 CHECK (block_torrent IN (0, 1));
ALTER TABLE groups ADD COLUMN block_smtp INTEGER NOT NULL DEFAULT 0 CHECK (block_smtp IN (0, 1));

-- Who is on each node, from its last report (a node's rows are replaced by each report,
-- and dropped when it has not reported for a while: see crate::publish::PRESENCE_TTL).
CREATE TABLE presence (
    node_id     INTEGER NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    user_id     INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    devices     INTEGER NOT NULL,
    connections INTEGER NOT NULL,
    PRIMARY KEY (node_id, user_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX presence_by_user ON presence (user_id, node_id);
-- When the node last reported who is on it.
ALTER TABLE nodes ADD COLUMN presence_at INTEGER NOT NULL DEFAULT 0;
-- When the user's profile last got the notice of a refused device (signed again for it at
-- most once an hour).
ALTER TABLE users ADD COLUMN refusal_noticed INTEGER NOT NULL DEFAULT 0;
