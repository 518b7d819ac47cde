-- acquire: create a PROCESSING record if the key is absent, else return the record.
-- KEYS[1] the record (a hash), KEYS[2] the key's fence counter
-- ARGV[1] owner token, ARGV[2] fingerprint, ARGV[3] lease in ms, ARGV[4] fence counter TTL beyond the record's, in ms
-- Returns {'1', fence, acquired_ms} when acquired, else the record as get.lua does.
local r = redis.call('HMGET', KEYS[1], 's', 'o', 'f', 'p', 'a', 't', 'c', 'h', 'b')
if r[1] then
  return {'0', r[1], r[2] or '', r[3] or '', r[4] or '', r[5] or '', r[6] or '', r[7] or '', r[8] or '', r[9] or '',
    tostring(redis.call('PTTL', KEYS[1]))}
end
-- The fence is the larger of the counter plus one and the server's clock in
-- microseconds: it keeps increasing when the counter itself is lost (expiry,
-- flush, a failover that did not replicate it), unless the clock goes back.
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fence = now_us
local last = tonumber(redis.call('GET', KEYS[2]))
if last and last >= fence then fence = last + 1 end
local fs = string.format('%.0f', fence)
local now_ms = string.format('%.0f', math.floor(now_us / 1000))
local lease = tonumber(ARGV[3])
redis.call('SET', KEYS[2], fs, 'PX', lease + tonumber(ARGV[4]))
redis.call('HSET', KEYS[1], 's', 'P', 'o', ARGV[1], 'f', fs, 'p', ARGV[2], 'a', now_ms)
redis.call('PEXPIRE', KEYS[1], lease)
return {'1', fs, now_ms}
