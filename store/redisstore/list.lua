-- list: read the records of index members, dropping from the index those that are no
-- longer UNKNOWN (resolved, completed, deleted, expired, acquired anew).
-- KEYS[1] the index of UNKNOWN records, KEYS[2..] the records; record.lua runs in front of this file.
-- ARGV[i] the index member of KEYS[i+1]
-- Returns, flat, for each record still UNKNOWN: its member, then its fields as get.lua
-- returns them (13 strings each).
local now_ms = clock()
local out = {}
for i = 2, #KEYS do
  local rec = redis.call('GET', KEYS[i])
  local r = rec and decode(rec)
  if r and r.st == 'U' and live(r, now_ms) then
    table.insert(out, ARGV[i - 1])
    for _, f in ipairs(reply(r, now_ms)) do table.insert(out, f) end
  else
    redis.call('ZREM', KEYS[1], ARGV[i - 1])
  end
end
return out
