-- Passkeys (WebAuthn), migration 17: each admin's (admin_id NULL: the owner's). A passkey
-- signs its admin in alone, and once an admin has one, a password sign-in needs it too (the
-- owner may give an authenticator code instead). Nothing here is secret: `passkey` is the
-- credential's public key and signature counter, as webauthn-rs keeps them (JSON).
CREATE TABLE passkeys (
    id            INTEGER PRIMARY KEY,
    admin_id      INTEGER REFERENCES admins (id) ON DELETE CASCADE,
    -- The account's WebAuthn user handle (16 random bytes, the same for all its passkeys).
    user_handle   BLOB NOT NULL,
    credential_id BLOB NOT NULL UNIQUE,
    passkey       TEXT NOT NULL,
    name          TEXT NOT NULL,
    created       INTEGER NOT NULL,
    last_used     INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX passkeys_admin ON passkeys (admin_id);
