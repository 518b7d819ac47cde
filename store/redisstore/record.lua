-- record: the encoding of a record and its reply, shared by acquire.lua and
-- get.lua. Redis scripts cannot load one another, so redisstore.go puts this
-- file in front of each of the two when it builds them (EVALSHA runs the
-- whole: the SHA is that of the joined source).
--
-- A record is one string (see redisstore.go): struct '>c1dI4c0' is the state
-- (P, C, or X for a tombstone that only keeps the fence), the end of the
-- lease or retention in ms, and the fence; P and C go on with 'I4c0I4c0d'
-- (owner, fingerprint, acquired ms), C with 'ddI4c0I4c0' (completed ms,
-- status, header, body). The key lives past the record's end, so a record
-- that ended (a logically absent key) still holds the last fence.

-- live_record returns the reply of record rec when it is live at now_ms:
-- {'0', state, owner, fence, fingerprint, acquired_ms, completed_ms, status,
-- header, body, ttl_ms}. For a tombstone or an ended record it returns nil
-- and the record's fence.
local function live_record(rec, now_ms)
  local st, ends, fence, pos = struct.unpack('>c1dI4c0', rec)
  if st == 'X' or ends <= now_ms then return nil, fence end
  local owner, fp, acquired, pos2 = struct.unpack('>I4c0I4c0d', rec, pos)
  local completed, status, header, body = '', '', '', ''
  if st == 'C' then
    local c, s
    c, s, header, body = struct.unpack('>ddI4c0I4c0', rec, pos2)
    completed, status = string.format('%.0f', c), string.format('%.0f', s)
  end
  return {'0', st, owner, fence, fp, string.format('%.0f', acquired), completed, status, header, body,
    string.format('%.0f', ends - now_ms)}
end

