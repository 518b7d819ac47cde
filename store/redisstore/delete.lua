-- delete: end a record in any state (admin invalidation). A tombstone that
-- keeps only the fence takes its place.
-- KEYS[1] the record (its encoding is described in record.lua)
-- ARGV[1] how long the tombstone lives, in ms
-- Returns 1 when there was a record, else 0.
local rec = redis.call('GET', KEYS[1])
if not rec then return 0 end
local st, ends, fence = struct.unpack('>c1dI4c0', rec)
if st == 'X' then return 0 end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[1], struct.pack('>c1dI4c0', 'X', 0, #fence, fence), 'PX', tonumber(ARGV[1]))
if ends <= now_ms then return 0 end
return 1
