-- extend: renew the caller's PROCESSING lease, checked by owner and fence. A
-- record past its lease is logically absent, so an expired lease can never be
-- renewed or re-created.
-- KEYS[1] the record (its encoding is described in record.lua)
-- ARGV[1] owner, ARGV[2] fence, ARGV[3] lease in ms, ARGV[4] how long the key outlives the lease, in ms
-- Returns 1 when renewed, 0 when the lease is lost.
local rec = redis.call('GET', KEYS[1])
if not rec then return 0 end
local st, ends, fence, pos = struct.unpack('>c1dI4c0', rec)
if st ~= 'P' or fence ~= ARGV[2] then return 0 end
local owner, fp, acquired = struct.unpack('>I4c0I4c0d', rec, pos)
if owner ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ends <= now_ms then return 0 end
local lease = tonumber(ARGV[3])
redis.call('SET', KEYS[1], struct.pack('>c1dI4c0I4c0I4c0d', 'P', now_ms + lease, #fence, fence,
  #owner, owner, #fp, fp, acquired), 'PX', lease + tonumber(ARGV[4]))
return 1
