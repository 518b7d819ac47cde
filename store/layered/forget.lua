-- forget: drop the mirror of a PROCESSING lease after a Release (accepted
-- or refused by the authority: either way the lease is over). A COMPLETED
-- mirror or another lease's mirror stays.
-- KEYS[1] the mirror
-- ARGV[1] fence
-- Returns 1 when dropped, else 0.
local r = redis.call('HMGET', KEYS[1], 's', 'f')
if r[1] ~= 'P' or r[2] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
