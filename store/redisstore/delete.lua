-- delete: end a record in any state (admin invalidation), or only the record with a
-- given fence, and drop it from the index. A tombstone that keeps only the fence
-- takes its place.
-- KEYS[1] the record, KEYS[2] the index of unsettled records, KEYS[3] the record's tombstone (deleted
-- with it); record.lua runs in front of this file.
-- ARGV[1] how long the tombstone lives, in ms, ARGV[2] the fence of the record to
-- delete ('0': any)
-- Returns 1 when there was a live record or tombstone and it was deleted, else 0.
local now_ms = clock()
local deleted = 0
local tomb = redis.call('GET', KEYS[3])
if tomb then
  local _, key_end, fence = struct.unpack('>c1dI4c0', tomb)
  if ARGV[2] == '0' or fence == ARGV[2] then
    redis.call('DEL', KEYS[3])
    if key_end > now_ms then deleted = 1 end
  end
end
local rec = redis.call('GET', KEYS[1])
if not rec then return deleted end
local r = decode(rec)
if r.st == 'X' then return deleted end
if ARGV[2] ~= '0' and r.fence ~= ARGV[2] then return deleted end
redis.call('SET', KEYS[1], pack_x(r.fence), 'PX', tonumber(ARGV[1]))
redis.call('ZREM', KEYS[2], index_member(KEYS[1]))
if live(r, now_ms) then return 1 end
return deleted
