-- get: read a mirrored record and its remaining TTL in one atomic step.
-- KEYS[1] the mirror (a hash)
-- Returns {} when absent, else {state, owner, fence, fingerprint, acquired_us, completed_us, status, header, body, pttl_ms,
-- reason (always empty: UNKNOWN records are not mirrored), label}.
local r = redis.call('HMGET', KEYS[1], 's', 'o', 'f', 'p', 'a', 't', 'c', 'h', 'b', 'l')
if not r[1] or r[1] == 'X' then return {} end -- X: a tombstone (delete.lua, forget.lua)
return {r[1], r[2] or '', r[3] or '', r[4] or '', r[5] or '', r[6] or '', r[7] or '', r[8] or '', r[9] or '',
  tostring(redis.call('PTTL', KEYS[1])), '', r[10] or ''}
