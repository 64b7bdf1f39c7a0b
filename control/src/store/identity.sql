-- A node's TLS identity as apps check it (see crate::store::identity): its self-signed
-- certificate (DER) and the names it is made out to (one a line), which the node registers;
-- and whether the owner lets apps that can check nothing connect to it anyway (shown in red).
ALTER TABLE nodes ADD COLUMN cert_der BLOB;
ALTER TABLE nodes ADD COLUMN cert_names TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN allow_unverified INTEGER NOT NULL DEFAULT 0 CHECK (allow_unverified IN (0, 1));
