-- get: read a record and its remaining TTL in one atomic step.
-- KEYS[1] the record (its encoding is described in acquire.lua)
-- Returns {} when absent, else {'0', state, owner, fence, fingerprint, acquired_ms, completed_ms, status, header, body, ttl_ms}.
local rec = redis.call('GET', KEYS[1])
if not rec then return {} end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local st, ends, fence, pos = struct.unpack('>c1dI4c0', rec)
if st == 'X' or ends <= now_ms then return {} end
local owner, fp, acquired, pos2 = struct.unpack('>I4c0I4c0d', rec, pos)
local completed, status, header, body = '', '', '', ''
if st == 'C' then
  local c, s
  c, s, header, body = struct.unpack('>ddI4c0I4c0', rec, pos2)
  completed, status = string.format('%.0f', c), string.format('%.0f', s)
end
return {'0', st, owner, fence, fp, string.format('%.0f', acquired), completed, status, header, body,
  string.format('%.0f', ends - now_ms)}
