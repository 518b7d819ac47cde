-- release: end the caller's PROCESSING record (its lease ended or not), checked by owner
-- and fence. A tombstone that keeps only the fence takes its place, so the next
-- acquisition gets a higher fence.
-- KEYS[1] the record; record.lua runs in front of this file.
-- ARGV[1] owner, ARGV[2] fence, ARGV[3] how long the tombstone lives, in ms
-- Returns 1 when released, 0 when the lease is lost.
local rec = redis.call('GET', KEYS[1])
if not rec then return 0 end
local r = decode(rec)
if r.st ~= 'P' or r.fence ~= ARGV[2] or r.owner ~= ARGV[1] then return 0 end
if not live(r, clock()) then return 0 end
redis.call('SET', KEYS[1], pack_x(r.fence), 'PX', tonumber(ARGV[3]))
return 1
