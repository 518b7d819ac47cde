-- complete: turn the caller's PROCESSING record into COMPLETED, checked by owner and fence.
-- KEYS[1] the record, KEYS[2] the key's fence counter
-- ARGV[1] owner, ARGV[2] fence, ARGV[3] retention in ms, ARGV[4] status, ARGV[5] encoded header, ARGV[6] body,
-- ARGV[7] fence counter TTL beyond the record's, in ms
-- Returns {'1'} when stored (or already stored by this same lease: a retried call), {'0'} when the lease is lost.
local r = redis.call('HMGET', KEYS[1], 's', 'o', 'f')
if r[2] ~= ARGV[1] or r[3] ~= ARGV[2] then return {'0'} end
if r[1] == 'C' then return {'1'} end
local t = redis.call('TIME')
local now_ms = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('HSET', KEYS[1], 's', 'C', 't', now_ms, 'c', ARGV[4], 'h', ARGV[5], 'b', ARGV[6])
local retention = tonumber(ARGV[3])
redis.call('PEXPIRE', KEYS[1], retention)
redis.call('PEXPIRE', KEYS[2], retention + tonumber(ARGV[7]))
return {'1'}
