-- delete: after the authority deleted the key (admin invalidation), replace
-- the mirror with a tombstone that holds the highest fence known for the
-- key, so a reader that fetched the old record from the authority before
-- the delete cannot write it back (put.lua refuses fences at or below it).
-- KEYS[1] the mirror
-- ARGV[1] the fence of the deleted record (0 if none), ARGV[2] the tombstone's TTL in ms
-- Returns 1 when a record was mirrored, else 0.
local cur = redis.call('HMGET', KEYS[1], 's', 'f')
local fence = math.max(tonumber(cur[2]) or 0, tonumber(ARGV[1]))
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 's', 'X', 'f', string.format('%.0f', fence))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if cur[1] and cur[1] ~= 'X' then return 1 end
return 0
