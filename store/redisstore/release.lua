-- release: delete the caller's PROCESSING record, checked by owner and fence.
-- The fence counter stays, so the next acquisition gets a higher fence.
-- KEYS[1] the record
-- ARGV[1] owner, ARGV[2] fence
-- Returns {'1'} when released, {'0'} when the lease is lost.
local r = redis.call('HMGET', KEYS[1], 's', 'o', 'f')
if r[1] ~= 'P' or r[2] ~= ARGV[1] or r[3] ~= ARGV[2] then return {'0'} end
redis.call('DEL', KEYS[1])
return {'1'}
