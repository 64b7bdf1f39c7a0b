-- Whether a node takes its credential set as deltas to the last full set (it says so on every
-- pull): nodes from before deltas are sent whole sets.
ALTER TABLE nodes ADD COLUMN deltas INTEGER NOT NULL DEFAULT 0 CHECK (deltas IN (0, 1));
-- Whether an edge keeps and serves those deltas (its answer to a push says so): control signs
-- deltas only when every edge does, and pushes none to an edge that has not said it does.
ALTER TABLE edges ADD COLUMN deltas INTEGER NOT NULL DEFAULT 0 CHECK (deltas IN (0, 1));
