-- complete: turn the caller's PROCESSING record into COMPLETED, checked by owner and fence.
-- KEYS[1] the record (its encoding is described in record.lua)
-- ARGV[1] owner, ARGV[2] fence, ARGV[3] retention in ms, ARGV[4] status, ARGV[5] encoded header, ARGV[6] body,
-- ARGV[7] how long the key outlives the retention, in ms
-- Returns 1 when stored (or already stored by this same lease: a retried call), 0 when the lease is lost.
local rec = redis.call('GET', KEYS[1])
if not rec then return 0 end
local st, ends, fence, pos = struct.unpack('>c1dI4c0', rec)
if st == 'X' or fence ~= ARGV[2] then return 0 end
local owner, fp, acquired = struct.unpack('>I4c0I4c0d', rec, pos)
if owner ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ends <= now_ms then return 0 end
if st == 'C' then return 1 end
local retention = tonumber(ARGV[3])
redis.call('SET', KEYS[1], struct.pack('>c1dI4c0I4c0I4c0dddI4c0I4c0', 'C', now_ms + retention, #fence, fence,
  #owner, owner, #fp, fp, acquired, now_ms, tonumber(ARGV[4]), #ARGV[5], ARGV[5], #ARGV[6], ARGV[6]),
  'PX', retention + tonumber(ARGV[7]))
return 1
