-- resolve: end an UNKNOWN record (an abandoned one too): COMPLETED with a result, or
-- deleted (a tombstone keeps the fence) when the work is known not to have run.
-- KEYS[1] the record, KEYS[2] the index of unsettled records, KEYS[3] the record's tombstone; record.lua
-- runs in front of this file.
-- ARGV[1] fence, ARGV[2] claim owner ('' for an operator), ARGV[3] '1' with a result, ARGV[4] retention
-- in ms, ARGV[5] status, ARGV[6] encoded header, ARGV[7] body, ARGV[8] how long the key outlives the
-- record, in ms, ARGV[9] the key retention in ms: above the retention, a tombstone lives that long
-- Returns 1 when resolved, 0 when the key is absent, -1 when it is not UNKNOWN, -2 when
-- the fence differs, -3 when the claim is not the record's current one.
local rec = redis.call('GET', KEYS[1])
if not rec then return 0 end
local r = decode(rec)
local now_ms = clock()
if not live(r, now_ms) then return 0 end
if r.st ~= 'U' and not abandoned(r, now_ms) then return -1 end
if r.fence ~= ARGV[1] then return -2 end
if ARGV[2] ~= '' and (r.claim ~= ARGV[2] or r.claim_until <= now_ms) then return -3 end
local grace = tonumber(ARGV[8])
if ARGV[3] == '1' then
  local retention = tonumber(ARGV[4])
  redis.call('SET', KEYS[1], pack_c(r, now_ms + retention, now_ms, tonumber(ARGV[5]), ARGV[6], ARGV[7]),
    'PX', retention + grace)
  local key_retention = tonumber(ARGV[9])
  if key_retention > retention then
    redis.call('SET', KEYS[3], pack_e(r, now_ms + key_retention, now_ms, tonumber(ARGV[5])), 'PX', key_retention)
  end
else
  redis.call('SET', KEYS[1], pack_x(r.fence), 'PX', grace)
end
redis.call('ZREM', KEYS[2], index_member(KEYS[1]))
return 1
