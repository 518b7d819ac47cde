-- release: end the caller's PROCESSING record, checked by owner and fence. A
-- tombstone that keeps only the fence takes its place, so the next
-- acquisition gets a higher fence.
-- KEYS[1] the record (its encoding is described in record.lua)
-- ARGV[1] owner, ARGV[2] fence, ARGV[3] how long the tombstone lives, in ms
-- Returns 1 when released, 0 when the lease is lost.
local rec = redis.call('GET', KEYS[1])
if not rec then return 0 end
local st, ends, fence, pos = struct.unpack('>c1dI4c0', rec)
if st ~= 'P' or fence ~= ARGV[2] then return 0 end
local owner = struct.unpack('>I4c0', rec, pos)
if owner ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ends <= now_ms then return 0 end
redis.call('SET', KEYS[1], struct.pack('>c1dI4c0', 'X', 0, #fence, fence), 'PX', tonumber(ARGV[3]))
return 1
