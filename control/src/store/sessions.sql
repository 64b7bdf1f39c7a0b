-- The owner's sessions as the owner sees them, migration 15: where each was started from and
-- in which browser (its User-Agent, cut to 256 bytes).
ALTER TABLE sessions ADD COLUMN address TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN agent TEXT NOT NULL DEFAULT '';
