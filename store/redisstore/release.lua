-- release: end the caller's record, checked by owner and fence: a PROCESSING one (its lease
-- ended or not), or an UNKNOWN one with reason 'abandoned' (turned UNKNOWN because its lease
-- ended, by nobody's word) that no reconciliation claim holds. A tombstone that keeps only
-- the fence takes its place, so the next acquisition gets a higher fence, and the key leaves
-- the index of unsettled records.
-- KEYS[1] the record, KEYS[2] the index of unsettled records; record.lua runs in front of this file.
-- ARGV[1] owner, ARGV[2] fence, ARGV[3] how long the tombstone lives, in ms
-- Returns 1 when released, 0 when the lease is lost.
local rec = redis.call('GET', KEYS[1])
if not rec then return 0 end
local r = decode(rec)
local now_ms = clock()
if r.fence ~= ARGV[2] or r.owner ~= ARGV[1] or not live(r, now_ms) then return 0 end
if r.st == 'U' then
  if r.reason ~= 'abandoned' or (r.claim ~= '' and r.claim_until > now_ms) then return 0 end
elseif r.st ~= 'P' then
  return 0
end
redis.call('SET', KEYS[1], pack_x(r.fence), 'PX', tonumber(ARGV[3]))
redis.call('ZREM', KEYS[2], index_member(KEYS[1]))
return 1
