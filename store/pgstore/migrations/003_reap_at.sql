-- 003_reap_at: the reaper finds due rows through reap_at, a column that
-- only acquisitions and the reaper write, instead of through an index on
-- expires_at. Complete and Extend change expires_at but no indexed column,
-- so PostgreSQL updates those rows in place on their page (a HOT update:
-- no new index entries), which makes the acquire+complete cycle cheaper.
--
-- reap_at is when the reaper looks at a row next: an acquisition sets it
-- to the end of the lease, the earliest the row can expire. A row the
-- reaper finds due but still live (its lease was extended, or it was
-- completed with a retention) is moved to its real end, expires_at, so the
-- reaper looks at every row a bounded number of times, however long its
-- retention. Rows from before this migration, or written by an older
-- version of the store during a rolling upgrade, get -infinity: due at
-- once, so the reaper deletes or moves them on its next call.
ALTER TABLE records ADD COLUMN IF NOT EXISTS reap_at timestamptz NOT NULL DEFAULT '-infinity';
CREATE INDEX IF NOT EXISTS records_reap_at ON records (reap_at);
DROP INDEX IF EXISTS records_expires_at;

-- Room on every page for the COMPLETED version of the rows inserted there
-- (it carries the body), so that Complete's HOT update finds space on the
-- same page also when many keys are acquired at once. Applies to pages
-- written from now on.
ALTER TABLE records SET (fillfactor = 90);
