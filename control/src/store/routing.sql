-- Routing per user (issue 50): the outbounds the owner defines, for every node (node_id 0) or
-- one node; the named rule sets (the official Hysteria 2 server's ACL syntax); and which rule
-- set a user, or a group's users, are given. An outbound's spec is its JSON without the
-- proxy's password, which is kept apart, sealed under the master key.
CREATE TABLE outbounds (
    id       INTEGER PRIMARY KEY,
    name     TEXT NOT NULL COLLATE NOCASE,
    node_id  INTEGER NOT NULL DEFAULT 0,
    spec     TEXT NOT NULL,
    password BLOB,
    UNIQUE (name, node_id)
);
CREATE TRIGGER outbounds_of_deleted_node AFTER DELETE ON nodes
BEGIN
    DELETE FROM outbounds WHERE node_id = OLD.id;
END;
CREATE TABLE rule_sets (
    id      INTEGER PRIMARY KEY CHECK (id BETWEEN 1 AND 65535),
    name    TEXT NOT NULL UNIQUE,
    text    TEXT NOT NULL,
    updated INTEGER NOT NULL DEFAULT 0
);
ALTER TABLE users ADD COLUMN rule_set_id INTEGER REFERENCES rule_sets (id);
ALTER TABLE groups ADD COLUMN rule_set_id INTEGER REFERENCES rule_sets (id);
