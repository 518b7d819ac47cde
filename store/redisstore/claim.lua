-- claim: take the reconciliation claim on an UNKNOWN record when nobody holds it or
-- the holder's claim ended. An abandoned record is turned UNKNOWN first, keeping
-- its nominal life. The record keeps no TTL (record.lua).
-- KEYS[1] the record, KEYS[2] the index of unsettled records; record.lua runs in front of this file.
-- ARGV[1] claim owner, ARGV[2] claim lease in ms, ARGV[3] unused (how long the key outlived the record, when
-- unsettled records had a TTL)
-- Returns {} when the key is absent, else the record as get.lua does, its first
-- field '1' when claimed and '0' when not.
local rec = redis.call('GET', KEYS[1])
if not rec then return {} end
local r = decode(rec)
local now_ms = clock()
if not live(r, now_ms) then return {} end
if abandoned(r, now_ms) then
  -- Its nominal life counts from now as it counted from its lease's end:
  -- the reply reports it as the attempt's retention (record.lua's reply).
  to_unknown(KEYS[1], KEYS[2], r, now_ms, 'abandoned', now_ms + (r.life - r.lease))
end
if r.st ~= 'U' or (r.claim ~= '' and r.claim_until > now_ms) then return reply(r, now_ms) end
redis.call('SET', KEYS[1], pack_u(r, r.life, r.completed, r.reason, ARGV[1], now_ms + tonumber(ARGV[2])))
local out = reply(r, now_ms)
out[1] = '1'
return out
