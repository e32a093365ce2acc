-- When each file record's hash was last read from the file with the record's stat
-- (store.FileRecord.VerifiedAt, docs/design/filehash.md, "The stat cache"), as SQLite's
-- migration 0015: at first the attempt's own read, later a check that read the file again and
-- found it as recorded (Assets.ConfirmFiles). Unix nanoseconds; 0 for never (the records stored
-- before this column, which a check then reads again once and confirms). Added without a table
-- rewrite (a constant default).
ALTER TABLE file_records ADD COLUMN verified_at BIGINT NOT NULL DEFAULT 0;
