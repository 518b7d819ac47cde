-- extend: mirror an Extend that the authority accepted.
-- KEYS[1] the mirror
-- ARGV[1] owner, ARGV[2] fence, ARGV[3] lease in ms
-- Returns 1 when renewed, else 0.
local r = redis.call('HMGET', KEYS[1], 's', 'o', 'f')
if r[1] ~= 'P' or r[2] ~= ARGV[1] or r[3] ~= ARGV[2] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
