-- acquire: create a PROCESSING record if the key is absent, else return the record.
-- KEYS[1] the record, KEYS[2] the index of unsettled records (record.lua), KEYS[3] the record's tombstone
-- ARGV[1] owner token, ARGV[2] fingerprint, ARGV[3] lease in ms, ARGV[4] the record's nominal life past
-- its lease, in ms (the longer of the retention and the key retention; record.lua: it ends nothing),
-- ARGV[5] unused (how long the key outlived the record, when unsettled records had a TTL), ARGV[6] '1' to
-- take over an abandoned record, ARGV[7] the label
-- Returns the string 'fence:acquired_ms' when acquired (one short bulk reply, the
-- common case), 'fence:acquired_ms:previous_fence:previous_acquired_ms' when it took
-- over an abandoned record, else the live record as get.lua does (an array): an
-- abandoned record is turned UNKNOWN first, its nominal life the retention's, or its
-- own when that ends later. The record has no Redis TTL: an unsettled record is never
-- forgotten by time (record.lua).
-- record.lua runs in front of this file.
local now_ms, t = clock()
-- The fence is the larger of the last fence plus one and the server's clock
-- in microseconds: it keeps increasing when the key itself is lost (flush,
-- eviction, a failover that did not replicate it), unless the clock goes back.
local us = string.format('%06d', tonumber(t[2]))
local fence = t[1] .. us
local lease, retention = tonumber(ARGV[3]), tonumber(ARGV[4])
-- A tombstone takes no acquisition: the record answers while live (a
-- replay), the tombstone after. A GET of a missing key on every acquire.
local tomb = redis.call('GET', KEYS[3])
if tomb then
  local rec = redis.call('GET', KEYS[1])
  local replay = rec and completed_reply(rec, now_ms)
  if replay then return replay end
  local gone = expired_reply(tomb, now_ms)
  if gone then return gone end
end
local function record(f)
  return pack_p(f, ARGV[1], ARGV[2], now_ms, now_ms + lease, now_ms + lease + retention, ARGV[7])
end
-- The common case, an absent key, takes one write: SET NX GET (Redis 7.0+)
-- creates the record (with no TTL), or changes nothing and returns the one in the way.
local rec = redis.call('SET', KEYS[1], record(fence), 'NX', 'GET')
-- now_ms as digits without string.format: the seconds, then the first three
-- of the six zero-padded microsecond digits.
local acquired = t[1] .. string.sub(us, 1, 3)
if not rec then
  redis.call('ZADD', KEYS[2], 0, index_member(KEYS[1]))
  return fence .. ':' .. acquired
end
local replay = completed_reply(rec, now_ms)
if replay then return replay end
local r = decode(rec)
local took = ''
if abandoned(r, now_ms) then
  -- Only the same request takes over its ended attempt; for any other the
  -- attempt's outcome is unknown, and stays so once seen.
  -- It keeps at least the life its own acquisition gave it: this Acquire's
  -- retention may be shorter (another route's, or a gateway started with a
  -- shorter one), and a key forgotten before then runs again.
  if ARGV[6] ~= '1' or r.fp ~= ARGV[2] then
    to_unknown(KEYS[1], KEYS[2], r, now_ms, 'abandoned', now_ms + math.max(r.life - r.lease, retention))
    return reply(r, now_ms)
  end
  took = ':' .. r.fence .. ':' .. ms(r.acquired)
elseif live(r, now_ms) then
  -- A record written before unsettled records lost their TTL still has
  -- one: it must not end either (record.lua). A no-op on any other.
  if unsettled(r) then redis.call('PERSIST', KEYS[1]) end
  return reply(r, now_ms)
end
-- An ended record, a tombstone or a taken-over one: take its place, above its fence.
if tonumber(r.fence) >= tonumber(fence) then fence = string.format('%.0f', tonumber(r.fence) + 1) end
redis.call('SET', KEYS[1], record(fence))
redis.call('ZADD', KEYS[2], 0, index_member(KEYS[1]))
return fence .. ':' .. acquired .. took
