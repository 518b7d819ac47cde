-- 006_key_until: tombstones (issue 27). A COMPLETED row whose Complete had a
-- key retention (idem.CompleteParams.KeyRetention) above its retention keeps
-- key_until: past expires_at, until key_until, the row is a tombstone
-- (EXPIRED): no acquisition takes the key, and the reaper has dropped its
-- header and body. NULL: none, the row ends at expires_at as before.
ALTER TABLE records ADD COLUMN IF NOT EXISTS key_until timestamptz;
