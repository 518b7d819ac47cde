-- complete: mirror a Complete that the authority accepted, if the mirror
-- holds the same lease. A missing mirror is left missing, and an older
-- lease's mirror is dropped: reads then fall through to the authority.
-- KEYS[1] the mirror
-- ARGV[1] owner, ARGV[2] fence, ARGV[3] retention in ms, ARGV[4] status, ARGV[5] header, ARGV[6] body
-- Returns 1 when written, else 0.
local r = redis.call('HMGET', KEYS[1], 's', 'o', 'f')
if r[1] ~= 'P' or r[2] ~= ARGV[1] or r[3] ~= ARGV[2] then
  if r[3] and tonumber(r[3]) < tonumber(ARGV[2]) then redis.call('DEL', KEYS[1]) end
  return 0
end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 's', 'C', 't', string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2])),
  'c', ARGV[4], 'h', ARGV[5], 'b', ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
