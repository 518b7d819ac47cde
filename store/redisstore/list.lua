-- list: read the records of index members: return the UNKNOWN ones and the PROCESSING ones
-- whose lease ended (abandoned: reported UNKNOWN), skip those whose lease holds, and drop
-- from the index the others (resolved, completed, released, deleted, expired).
-- KEYS[1] the index of unsettled records, KEYS[2..] the records; record.lua runs in front of
-- this file.
-- ARGV[i] the index member of KEYS[i+1]
-- Returns, flat, for each record listed: its member, then its fields as get.lua
-- returns them (14 strings each).
local now_ms = clock()
local out = {}
for i = 2, #KEYS do
  local rec = redis.call('GET', KEYS[i])
  local r = rec and decode(rec)
  if r and (r.st == 'U' or r.st == 'P') and live(r, now_ms) then
    -- One written before unsettled records lost their TTL still has it
    -- (record.lua); a no-op on any other.
    redis.call('PERSIST', KEYS[i])
    if r.st == 'U' or abandoned(r, now_ms) then
      table.insert(out, ARGV[i - 1])
      for _, f in ipairs(reply(r, now_ms)) do table.insert(out, f) end
    end
  else
    redis.call('ZREM', KEYS[1], ARGV[i - 1])
  end
end
return out
