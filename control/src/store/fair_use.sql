-- Fair use (devices, kicks, the abuse guard, node multipliers and quotas), migration 10.

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

-- What a node's traffic counts for (per mille: 2000 counts each byte twice, 500 half), its
-- monthly traffic cap in bytes (0: none), the day of the month the cap's period starts, when
-- the current period ends (0: no cap), the bytes it carried in it, and whether it reached
-- the cap (it then carries nobody until the period ends).
ALTER TABLE nodes ADD COLUMN multiplier INTEGER NOT NULL DEFAULT 1000 CHECK (multiplier BETWEEN 1 AND 100000);
ALTER TABLE nodes ADD COLUMN quota INTEGER NOT NULL DEFAULT 0 CHECK (quota >= 0);
ALTER TABLE nodes ADD COLUMN quota_day INTEGER NOT NULL DEFAULT 1 CHECK (quota_day BETWEEN 1 AND 28);
ALTER TABLE nodes ADD COLUMN quota_next INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN quota_used INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN limited INTEGER NOT NULL DEFAULT 0 CHECK (limited IN (0, 1));

-- A user's traffic as the nodes measured it, before multipliers (used_up/used_down are what
-- it counted for: the quota holds against those); reset with them.
ALTER TABLE users ADD COLUMN raw_up INTEGER NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN raw_down INTEGER NOT NULL DEFAULT 0;
