-- get: read a record and its remaining TTL in one atomic step, without writing.
-- KEYS[1] the record; record.lua runs in front of this file.
-- Returns {} when absent, else {'0', state, owner, fence, fingerprint, acquired_ms,
-- completed_ms, status, header, body, ttl_ms, reason}; an abandoned record is reported UNKNOWN.
local rec = redis.call('GET', KEYS[1])
if not rec then return {} end
local r = decode(rec)
local now_ms = clock()
if not live(r, now_ms) then return {} end
return reply(r, now_ms)
