-- The owner's second factor: a TOTP secret (sealed with the master key; NULL while off), one
-- being enrolled (until a first code confirms it), the last time step used (a code works
-- once), and single-use recovery codes (SHA-256 of each).
ALTER TABLE owner ADD COLUMN totp_secret BLOB;
ALTER TABLE owner ADD COLUMN totp_pending BLOB;
ALTER TABLE owner ADD COLUMN totp_last_step INTEGER NOT NULL DEFAULT 0;

CREATE TABLE recovery_codes (
    code_hash BLOB PRIMARY KEY
) STRICT;
