-- get: read a record and its remaining TTL in one atomic step.
-- KEYS[1] the record; record.lua (the encoding, and live_record) runs in front of this file.
-- Returns {} when absent, else {'0', state, owner, fence, fingerprint, acquired_ms, completed_ms, status, header, body, ttl_ms}.
local rec = redis.call('GET', KEYS[1])
if not rec then return {} end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return live_record(rec, now_ms) or {}
