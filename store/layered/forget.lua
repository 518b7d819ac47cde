-- forget: after a Release (accepted or refused by the authority: either way
-- the lease is over), replace the mirror with a tombstone holding the
-- lease's fence, so a reader that fetched the PROCESSING record from the
-- authority before the release cannot write it back (put.lua). A mirror of
-- a newer lease (a higher fence) or of the lease's own COMPLETED result stays.
-- KEYS[1] the mirror
-- ARGV[1] fence, ARGV[2] the tombstone's TTL in ms
-- Returns 1 when the tombstone was written, else 0.
local r = redis.call('HMGET', KEYS[1], 's', 'f')
if r[2] then
  local f = tonumber(r[2])
  if f > tonumber(ARGV[1]) or (f == tonumber(ARGV[1]) and r[1] == 'C') then return 0 end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 's', 'X', 'f', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
