-- 008_label: the label of an acquisition (issue 36, item 4): what the work
-- is ("POST /v1/orders route=orders"), for an operator who finds the key
-- UNKNOWN. At most 200 bytes (store.MaxLabelLength), written by Acquire
-- and kept by every later change of the row; a tombstone's is dropped by
-- the reaper with the header and body. NULL: none (a row written before,
-- or an acquisition without one), which costs a row nothing but its bit in
-- the null bitmap.
ALTER TABLE records ADD COLUMN IF NOT EXISTS label text;
