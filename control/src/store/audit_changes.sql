-- What an edit changed, field by field, for the panel to put in words: a JSON array of
-- {field, from, to} (from and to left out where a value is not shown, as for a note); NULL
-- for entries that are no edit. And the audit log's filters, by who and by what.
ALTER TABLE audit ADD COLUMN changes TEXT;
CREATE INDEX audit_actor ON audit (actor, id);
CREATE INDEX audit_action ON audit (action, id);
