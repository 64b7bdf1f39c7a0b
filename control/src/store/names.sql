-- Users' names are unique whatever their case ("Mom" and "mom" are one person to an owner):
-- control checks a new name against this index before it stores one. An index, not a unique
-- one: a database from before may hold names that differ by case only, and keeps them.
CREATE INDEX users_name_nocase ON users (name COLLATE NOCASE);
