-- complete: turn the caller's PROCESSING (its lease ended or not) or UNKNOWN record into
-- COMPLETED, checked by owner and fence. An unsettled record never ends by time (record.lua),
-- so its owner's late Complete lands however late it comes.
-- KEYS[1] the record, KEYS[2] the index of unsettled records, KEYS[3] the record's tombstone; record.lua
-- runs in front of this file.
-- ARGV[1] owner, ARGV[2] fence, ARGV[3] retention in ms, ARGV[4] status, ARGV[5] encoded header, ARGV[6] body,
-- ARGV[7] how long the key outlives the retention, in ms, ARGV[8] the key retention in ms: above the
-- retention, a tombstone lives that long
-- Returns 1 when stored (or already stored by this same lease: a retried call), 0 when the lease is lost.
local rec = redis.call('GET', KEYS[1])
if not rec then return 0 end
local now_ms = clock()
local retention, status, key_retention = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[8])
local written
if string.byte(rec) == 80 then -- 'P'
  -- The common case, read from the string without decoding it into a table:
  -- the fence, owner, fingerprint and acquired time go into the COMPLETED
  -- record as they are, bytes 10 to the end of the acquired time, and so
  -- does the label at the end (record.lua's layouts of P and C).
  local _, _, fence, owner, pos = struct.unpack('>c1dI4c0I4c0', rec)
  if fence ~= ARGV[2] or owner ~= ARGV[1] then return 0 end
  local after = pos + 4 + struct.unpack('>I4', rec, pos) + 8 -- past the fingerprint and the acquired time
  local label = '\0\0\0\0' -- a record written before the life field has no label either
  if after + 8 <= #rec then label = string.sub(rec, after + 8) end
  written = struct.pack('>c1dc0ddI4c0I4c0c0', 'C', now_ms + retention, string.sub(rec, 10, after - 1), now_ms, status,
    #ARGV[5], ARGV[5], #ARGV[6], ARGV[6], label)
  if key_retention > retention then
    local fp = struct.unpack('>I4c0', rec, pos)
    redis.call('SET', KEYS[3], pack_e({fence = fence, fp = fp}, now_ms + key_retention, now_ms, status), 'PX', key_retention)
  end
else
  local r = decode(rec)
  if r.st == 'X' or r.fence ~= ARGV[2] or r.owner ~= ARGV[1] then return 0 end
  if not live(r, now_ms) then return 0 end
  if r.st == 'C' then return 1 end
  written = pack_c(r, now_ms + retention, now_ms, status, ARGV[5], ARGV[6])
  if key_retention > retention then
    redis.call('SET', KEYS[3], pack_e(r, now_ms + key_retention, now_ms, status), 'PX', key_retention)
  end
end
redis.call('SET', KEYS[1], written, 'PX', retention + tonumber(ARGV[7]))
redis.call('ZREM', KEYS[2], index_member(KEYS[1]))
return 1
