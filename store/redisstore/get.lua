-- get: read a record and its remaining TTL in one atomic step, without writing.
-- KEYS[1] the record, KEYS[2] its tombstone; record.lua runs in front of this file.
-- Returns {} when absent, else {'0', state, owner, fence, fingerprint, acquired_ms,
-- completed_ms, status, header, body, ttl_ms, reason, label}; an abandoned record is reported UNKNOWN,
-- a live tombstone of an ended record EXPIRED.
local now_ms = clock()
local rec = redis.call('GET', KEYS[1])
if rec then
  local r = decode(rec)
  if live(r, now_ms) then return reply(r, now_ms) end
end
return expired_reply(redis.call('GET', KEYS[2]), now_ms) or {}
