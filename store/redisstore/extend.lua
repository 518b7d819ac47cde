-- extend: renew the caller's PROCESSING lease, checked by owner and fence. An
-- expired record is gone, so an expired lease can never be renewed or re-created.
-- KEYS[1] the record, KEYS[2] the key's fence counter
-- ARGV[1] owner, ARGV[2] fence, ARGV[3] lease in ms, ARGV[4] fence counter TTL beyond the record's, in ms
-- Returns {'1'} when renewed, {'0'} when the lease is lost.
local r = redis.call('HMGET', KEYS[1], 's', 'o', 'f')
if r[1] ~= 'P' or r[2] ~= ARGV[1] or r[3] ~= ARGV[2] then return {'0'} end
local lease = tonumber(ARGV[3])
redis.call('PEXPIRE', KEYS[1], lease)
redis.call('PEXPIRE', KEYS[2], lease + tonumber(ARGV[4]))
return {'1'}
