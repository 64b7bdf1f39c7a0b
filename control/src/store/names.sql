-- Users' names are unique whatever the case of their Latin letters ("Mom" and "mom" are one
-- person to an owner; NOCASE folds ASCII only):
-- control checks a new name against this index before it stores one. An index, not a unique
-- one: a database from before may hold names that differ by case only, and keeps them.
CREATE INDEX users_name_nocase ON users (name COLLATE NOCASE);
