-- record: the encoding of a record and of its reply, shared by every
-- script. Redis scripts cannot load one another, so redisstore.go puts this
-- file in front of each script when it builds them (EVALSHA runs the
-- whole: the SHA is that of the joined source).
--
-- A record is one string. Every state starts with struct '>c1dI4c0': the
-- state, an end time in ms and the fence.
--   X  a tombstone that only keeps the fence (end 0).
--   P  PROCESSING; the end is the lease's end. Then 'I4c0I4c0d' (owner,
--      fingerprint, acquired ms) and 'd', the end of the record's nominal
--      life (lease + retention: see below). A record written before the
--      life field existed has none: its nominal life is its lease.
--   C  COMPLETED; the end is the retention's. Then 'I4c0I4c0d' as P and
--      'ddI4c0I4c0' (completed ms, status, header, body).
--   U  UNKNOWN; the end is the nominal life's. Then 'I4c0I4c0d' as P and
--      'dI4c0I4c0d' (marked ms, reason, claim owner, claim end ms).
-- P, C and U end with 'I4c0', the label (store.AcquireParams.Label),
-- which every change of the record keeps; a record written before the
-- label existed has none.
-- A COMPLETED record with a key retention (idem.CompleteParams.KeyRetention)
-- also has a tombstone, a key of its own next to the record's (in the same
-- slot: the record's key and '~e'), written by complete.lua and ended by
-- Redis (PX) when the key retention ends: struct '>c1dI4c0I4c0dd', 'E', the
-- end of the key retention in ms, fence, fingerprint, completed ms, status.
-- While the record is live it answers; after, until the tombstone ends, the
-- tombstone does (reported EXPIRED), and no acquisition takes the key.
-- An unsettled record (PROCESSING, its lease running or ended, and
-- UNKNOWN) is never forgotten by time: it is always live, and its key has
-- no Redis TTL. Only settling ends it: complete, release, resolve, delete.
-- A PROCESSING record whose lease ended is abandoned, reported UNKNOWN.
-- Its nominal life (the life field of P, the end of U: the longer of the
-- retention and the key retention past its lease's end or its mark) ends
-- nothing and is reported nowhere (an UNKNOWN record's TTL is 0: kept
-- until settled); it is still written, so that a gateway of the version
-- before, during a rolling upgrade, reads a record it knows. Records
-- written before this rule carry a finite life and a Redis TTL; they are
-- read the same way (never ending), and a script that rewrites one, or
-- finds one in the way (acquire, mark unknown, list), removes its TTL
-- (PERSIST); one that no script touches still ends with its old TTL.
-- A COMPLETED record is live until its retention ends. Its key, and that
-- of a tombstone X, lives an hour past that (its Redis TTL), so a record
-- that ended (a logically absent key) still holds the last fence.
--
-- The index of unsettled records is a sorted set (KEYS[2] of the scripts
-- that change it) whose members are the record key's hash tag,
-- 'len(tenant):tenant:key', all with score 0, so ZRANGEBYLEX pages it by
-- tenant. It holds the records whose outcome is or may become unknown:
-- acquire adds a PROCESSING record, complete, release, resolve and delete
-- remove it; ListUnknown lists its UNKNOWN records and its PROCESSING ones
-- whose lease ended (a crashed owner's), and drops what went stale.

local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t
end

-- decode returns the fields of record string rec as a table.
local function decode(rec)
  local r, pos = {}
  r.st, r.ends, r.fence, pos = struct.unpack('>c1dI4c0', rec)
  r.life = r.ends
  if r.st == 'X' then return r end
  r.owner, r.fp, r.acquired, pos = struct.unpack('>I4c0I4c0d', rec, pos)
  if r.st == 'P' then
    r.lease = r.ends
    if pos <= #rec then r.life, pos = struct.unpack('>d', rec, pos) end
  elseif r.st == 'C' then
    r.completed, r.status, r.header, r.body, pos = struct.unpack('>ddI4c0I4c0', rec, pos)
  elseif r.st == 'U' then
    r.completed, r.reason, r.claim, r.claim_until, pos = struct.unpack('>dI4c0I4c0d', rec, pos)
  end
  r.label = ''
  if pos <= #rec then r.label = struct.unpack('>I4c0', rec, pos) end
  return r
end

local function unsettled(r) return r.st == 'P' or r.st == 'U' end
local function live(r, now_ms) return unsettled(r) or (r.st == 'C' and r.life > now_ms) end
local function abandoned(r, now_ms) return r.st == 'P' and r.lease <= now_ms end

local function pack_p(fence, owner, fp, acquired, lease_end, life_end, label)
  return struct.pack('>c1dI4c0I4c0I4c0ddI4c0', 'P', lease_end, #fence, fence, #owner, owner, #fp, fp, acquired, life_end,
    #label, label)
end

local function pack_c(r, life_end, completed, status, header, body)
  return struct.pack('>c1dI4c0I4c0I4c0dddI4c0I4c0I4c0', 'C', life_end, #r.fence, r.fence, #r.owner, r.owner,
    #r.fp, r.fp, r.acquired, completed, status, #header, header, #body, body, #r.label, r.label)
end

local function pack_u(r, life_end, completed, reason, claim, claim_until)
  return struct.pack('>c1dI4c0I4c0I4c0ddI4c0I4c0dI4c0', 'U', life_end, #r.fence, r.fence, #r.owner, r.owner,
    #r.fp, r.fp, r.acquired, completed, #reason, reason, #claim, claim, claim_until, #r.label, r.label)
end

local function pack_x(fence) return struct.pack('>c1dI4c0', 'X', 0, #fence, fence) end

-- index_member is the index member of the record at key: its hash tag.
local function index_member(key) return string.match(key, '{(.*)}$') end

-- to_unknown turns r (PROCESSING, abandoned or not) UNKNOWN for reason,
-- its nominal life ending at life_end, with no claim, writes it to key
-- with no TTL (SET drops the one an old record had), and indexes it.
local function to_unknown(key, index, r, now_ms, reason, life_end)
  r.st, r.life, r.completed, r.reason, r.claim, r.claim_until = 'U', life_end, now_ms, reason, '', 0
  redis.call('SET', key, pack_u(r, life_end, now_ms, reason, '', 0))
  redis.call('ZADD', index, 0, index_member(key))
end

local function ms(n) return string.format('%.0f', n) end

-- reply returns the reply of live record r at now_ms: {'0', state, owner,
-- fence, fingerprint, acquired_ms, completed_ms, status, header, body,
-- ttl_ms, reason, label}. An abandoned record is reported UNKNOWN, unknown
-- since its lease ended. An UNKNOWN record has no TTL (kept until
-- settled): its ttl_ms is the retention its attempt asked for (its nominal
-- life past its lease's end or its mark), which a reconciliation or a
-- resolve keeps the result for at least (store.Record.Retention).
local function reply(r, now_ms)
  if abandoned(r, now_ms) then
    return {'0', 'U', r.owner, r.fence, r.fp, ms(r.acquired), ms(r.lease), '', '', '', ms(r.life - r.lease), 'abandoned',
      r.label}
  end
  if r.st == 'P' then
    return {'0', 'P', r.owner, r.fence, r.fp, ms(r.acquired), '', '', '', '', ms(r.lease - now_ms), '', r.label}
  end
  if r.st == 'C' then
    return {'0', 'C', r.owner, r.fence, r.fp, ms(r.acquired), ms(r.completed), ms(r.status), r.header, r.body,
      ms(r.life - now_ms), '', r.label}
  end
  return {'0', 'U', r.owner, r.fence, r.fp, ms(r.acquired), ms(r.completed), '', '', '', ms(r.life - r.completed), r.reason,
    r.label}
end

-- completed_reply returns reply(decode(rec), now_ms) when rec is a live
-- COMPLETED record, else nil: the replay, the common case after a first
-- request, read straight from the string (decode's table of fields cost a
-- replay a quarter of its script time).
local function completed_reply(rec, now_ms)
  if string.byte(rec) ~= 67 then return nil end -- 'C'
  local _, life, fence, pos = struct.unpack('>c1dI4c0', rec)
  if life <= now_ms then return nil end
  local owner, fp, acquired, completed, status, header, body
  owner, fp, acquired, completed, status, header, body, pos = struct.unpack('>I4c0I4c0dddI4c0I4c0', rec, pos)
  local label = ''
  if pos <= #rec then label = struct.unpack('>I4c0', rec, pos) end
  return {'0', 'C', owner, fence, fp, ms(acquired), ms(completed), ms(status), header, body, ms(life - now_ms), '', label}
end

local function pack_e(r, key_end, completed, status)
  return struct.pack('>c1dI4c0I4c0dd', 'E', key_end, #r.fence, r.fence, #r.fp, r.fp, completed, status)
end

-- expired_reply returns the reply of tombstone string tomb (nil: none) at
-- now_ms, or nil when there is none or its key retention ended.
local function expired_reply(tomb, now_ms)
  if not tomb then return nil end
  local _, key_end, fence, fp, completed, status = struct.unpack('>c1dI4c0I4c0dd', tomb)
  if key_end <= now_ms then return nil end
  return {'0', 'E', '', fence, fp, '', ms(completed), ms(status), '', '', ms(key_end - now_ms), '', ''}
end
