-- complete: turn the caller's PROCESSING (its lease ended or not) or UNKNOWN record into
-- COMPLETED, checked by owner and fence.
-- KEYS[1] the record, KEYS[2] the index of unsettled records, KEYS[3] the record's tombstone; record.lua
-- runs in front of this file.
-- ARGV[1] owner, ARGV[2] fence, ARGV[3] retention in ms, ARGV[4] status, ARGV[5] encoded header, ARGV[6] body,
-- ARGV[7] how long the key outlives the retention, in ms, ARGV[8] the key retention in ms: above the
-- retention, a tombstone lives that long
-- Returns 1 when stored (or already stored by this same lease: a retried call), 0 when the lease is lost.
local rec = redis.call('GET', KEYS[1])
if not rec then return 0 end
local r = decode(rec)
if r.st == 'X' or r.fence ~= ARGV[2] or r.owner ~= ARGV[1] then return 0 end
local now_ms = clock()
if not live(r, now_ms) then return 0 end
if r.st == 'C' then return 1 end
local retention = tonumber(ARGV[3])
redis.call('SET', KEYS[1], pack_c(r, now_ms + retention, now_ms, tonumber(ARGV[4]), ARGV[5], ARGV[6]),
  'PX', retention + tonumber(ARGV[7]))
redis.call('ZREM', KEYS[2], index_member(KEYS[1]))
local key_retention = tonumber(ARGV[8])
if key_retention > retention then
  redis.call('SET', KEYS[3], pack_e(r, now_ms + key_retention, now_ms, tonumber(ARGV[4])), 'PX', key_retention)
end
return 1
