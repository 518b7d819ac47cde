-- extend: renew the caller's PROCESSING lease, checked by owner and fence. A
-- lease that ended is never renewed: its record is abandoned, and the next
-- acquisition turns it UNKNOWN or takes it over.
-- KEYS[1] the record; record.lua runs in front of this file.
-- ARGV[1] owner, ARGV[2] fence, ARGV[3] lease in ms, ARGV[4] the record's nominal life past its lease,
-- in ms (the longer of the retention and the key retention; record.lua: it ends nothing, the record
-- has no TTL), ARGV[5] unused (how long the key outlived the record, when unsettled records had a TTL)
-- Returns 1 when renewed, 0 when the lease is lost.
local rec = redis.call('GET', KEYS[1])
if not rec then return 0 end
local r = decode(rec)
if r.st ~= 'P' or r.fence ~= ARGV[2] or r.owner ~= ARGV[1] then return 0 end
local now_ms = clock()
if r.lease <= now_ms then return 0 end
local lease, retention = tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('SET', KEYS[1], pack_p(r.fence, r.owner, r.fp, r.acquired, now_ms + lease, now_ms + lease + retention, r.label))
return 1
