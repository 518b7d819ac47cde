-- drop: after the authority resolved an UNKNOWN key as completed, remove a
-- mirrored PROCESSING copy of that attempt or an older one (a write-back
-- that raced with MarkUnknown, or a forget that Redis missed), so that the
-- next read mirrors the COMPLETED record from the authority. No tombstone:
-- the authority's COMPLETED record has the same fence and must be
-- mirrorable at once. A tombstone (a Delete) or a newer lease stays.
-- KEYS[1] the mirror
-- ARGV[1] the resolved record's fence
-- Returns 1 when a copy was removed, else 0.
local r = redis.call('HMGET', KEYS[1], 's', 'f')
if r[1] == 'P' and tonumber(r[2]) <= tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
