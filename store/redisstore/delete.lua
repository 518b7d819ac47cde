-- delete: end a record in any state (admin invalidation), or only the record with a
-- given fence, and drop it from the index. A tombstone that keeps only the fence
-- takes its place.
-- KEYS[1] the record, KEYS[2] the index of UNKNOWN records; record.lua runs in front of this file.
-- ARGV[1] how long the tombstone lives, in ms, ARGV[2] the fence of the record to
-- delete ('0': any)
-- Returns 1 when there was a live record and it was deleted, else 0.
local rec = redis.call('GET', KEYS[1])
if not rec then return 0 end
local r = decode(rec)
if r.st == 'X' then return 0 end
if ARGV[2] ~= '0' and r.fence ~= ARGV[2] then return 0 end
redis.call('SET', KEYS[1], pack_x(r.fence), 'PX', tonumber(ARGV[1]))
redis.call('ZREM', KEYS[2], index_member(KEYS[1]))
if live(r, clock()) then return 1 end
return 0
