-- put: mirror a record read from the authority, unless the mirror already
-- holds a newer one: a higher fence, or the same fence COMPLETED where the
-- new copy is still PROCESSING, or a tombstone (X) of a deleted or released
-- key at or above the new fence. So a slow writer never rolls the mirror back.
-- KEYS[1] the mirror
-- ARGV[1] state (P or C), ARGV[2] owner, ARGV[3] fence, ARGV[4] fingerprint, ARGV[5] acquired_us,
-- ARGV[6] completed_us, ARGV[7] status, ARGV[8] header, ARGV[9] body, ARGV[10] TTL in ms (> 0), ARGV[11] label
-- Returns 1 when written, 0 when the mirror was newer.
local cur = redis.call('HMGET', KEYS[1], 's', 'f')
if cur[2] then
  local f, nf = tonumber(cur[2]), tonumber(ARGV[3])
  if f > nf or (f == nf and (cur[1] == 'X' or (cur[1] == 'C' and ARGV[1] == 'P'))) then return 0 end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 's', ARGV[1], 'o', ARGV[2], 'f', ARGV[3], 'p', ARGV[4], 'a', ARGV[5],
  't', ARGV[6], 'c', ARGV[7], 'h', ARGV[8], 'b', ARGV[9], 'l', ARGV[11])
redis.call('PEXPIRE', KEYS[1], ARGV[10])
return 1
