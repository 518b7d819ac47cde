-- markunknown: turn the caller's PROCESSING record (its lease ended or not) UNKNOWN,
-- checked by owner and fence, and index it. The caller's UNKNOWN record stays as it
-- is (a retried call, or an abandoned record: the first reason is kept).
-- KEYS[1] the record, KEYS[2] the index of unsettled records; record.lua runs in front of this file.
-- ARGV[1] owner, ARGV[2] fence, ARGV[3] reason, ARGV[4] its nominal life, in ms (the longer of the
-- retention and the key retention; record.lua: it ends nothing, the record has no TTL), ARGV[5] unused
-- (how long the key outlived the record, when unsettled records had a TTL)
-- Returns 1 when the record is UNKNOWN, 0 when the lease is lost.
local rec = redis.call('GET', KEYS[1])
if not rec then return 0 end
local r = decode(rec)
if (r.st ~= 'P' and r.st ~= 'U') or r.fence ~= ARGV[2] or r.owner ~= ARGV[1] then return 0 end
local now_ms = clock()
if not live(r, now_ms) then return 0 end
if r.st == 'U' then
  redis.call('PERSIST', KEYS[1]) -- one written before unsettled records lost their TTL
  redis.call('ZADD', KEYS[2], 0, index_member(KEYS[1]))
  return 1
end
to_unknown(KEYS[1], KEYS[2], r, now_ms, ARGV[3], now_ms + tonumber(ARGV[4]))
return 1
