-- What each user puts in nodes' credential sets (its entry in each group of each node), as a
-- digest: a change to a user signs the nodes' sets again only when it changed.
ALTER TABLE users ADD COLUMN creds_digest BLOB;
