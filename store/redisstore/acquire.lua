-- acquire: create a PROCESSING record if the key is absent, else return the record.
-- KEYS[1] the record
-- ARGV[1] owner token, ARGV[2] fingerprint, ARGV[3] lease in ms, ARGV[4] how long the key outlives the lease, in ms
-- Returns the string 'fence:acquired_ms' when acquired (one short bulk reply, the
-- common case), else the live record as get.lua does (an array).
-- record.lua (the encoding, and live_record) runs in front of this file. The
-- key lives ARGV[4] past the record's end, so a record that ended (a
-- logically absent key) still holds the last fence.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The fence is the larger of the last fence plus one and the server's clock
-- in microseconds: it keeps increasing when the key itself is lost (flush,
-- eviction, a failover that did not replicate it), unless the clock goes back.
local us = string.format('%06d', tonumber(t[2]))
local fence = t[1] .. us
local lease = tonumber(ARGV[3])
local ttl = lease + tonumber(ARGV[4])
local function record(f)
  return struct.pack('>c1dI4c0I4c0I4c0d', 'P', now_ms + lease, #f, f, #ARGV[1], ARGV[1], #ARGV[2], ARGV[2], now_ms)
end
-- The common case, an absent key, takes one write: SET NX GET (Redis 7.0+)
-- creates the record, or changes nothing and returns the one in the way.
local rec = redis.call('SET', KEYS[1], record(fence), 'NX', 'GET', 'PX', ttl)
if rec then
  local live, last = live_record(rec, now_ms)
  if live then return live end
  -- An ended record or a tombstone: take its place, above its fence.
  if tonumber(last) >= tonumber(fence) then fence = string.format('%.0f', tonumber(last) + 1) end
  redis.call('SET', KEYS[1], record(fence), 'PX', ttl)
end
-- now_ms as digits without string.format: the seconds, then the first three
-- of the six zero-padded microsecond digits.
return fence .. ':' .. t[1] .. string.sub(us, 1, 3)
