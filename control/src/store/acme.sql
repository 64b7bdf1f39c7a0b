-- A node's public certificate by ACME (see crate::store::identity): the domain the owner gave
-- it, what the node last said of its certificate (the domain it holds one for, which pinned
-- links never ask for; the certificate, DER; when it expires; when it was issued; the last
-- error and when), whether links check it the usual way now (published so), and the expiry
-- an event was raised for.
ALTER TABLE nodes ADD COLUMN domain TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN acme_domain TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN acme_cert BLOB;
ALTER TABLE nodes ADD COLUMN acme_not_after INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN acme_renewed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN acme_error TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN acme_error_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN acme_public INTEGER NOT NULL DEFAULT 0 CHECK (acme_public IN (0, 1));
ALTER TABLE nodes ADD COLUMN acme_warned INTEGER NOT NULL DEFAULT 0;
