-- Whether a node takes its credential set as deltas to the last full set (it says so on every
-- pull): nodes from before deltas are sent whole sets.
ALTER TABLE nodes ADD COLUMN deltas INTEGER NOT NULL DEFAULT 0 CHECK (deltas IN (0, 1));
