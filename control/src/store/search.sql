-- Finding users by a part of their name or note (migration 18). A trigram index over both, so
-- a search of three characters or more reads the users that hold the text, not every user
-- (a full scan took 27 ms at 100,000 users). Its content is the users table itself, kept in
-- step by the triggers below; nothing is stored twice but the index.
CREATE VIRTUAL TABLE user_search USING fts5 (
    name, note, content = 'users', content_rowid = 'id', tokenize = 'trigram'
);
INSERT INTO user_search (user_search) VALUES ('rebuild');
CREATE TRIGGER user_search_insert AFTER INSERT ON users BEGIN
    INSERT INTO user_search (rowid, name, note) VALUES (new.id, new.name, new.note);
END;
CREATE TRIGGER user_search_delete AFTER DELETE ON users BEGIN
    INSERT INTO user_search (user_search, rowid, name, note) VALUES ('delete', old.id, old.name, old.note);
END;
CREATE TRIGGER user_search_update AFTER UPDATE OF name, note ON users BEGIN
    INSERT INTO user_search (user_search, rowid, name, note) VALUES ('delete', old.id, old.name, old.note);
    INSERT INTO user_search (rowid, name, note) VALUES (new.id, new.name, new.note);
END;
