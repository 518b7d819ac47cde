-- batch: many single-key operations in one script call (Options.Coalesce), each
-- answered separately, exactly as its own script would have answered it.
-- coalesce.go puts in front of this file record.lua, then each operation's own
-- script as a function of (KEYS, ARGV) and the table OPS of those functions: an
-- operation runs the very code of its script, on its own keys and arguments.
-- ARGV: for each operation in turn, its index in OPS, its key count, its argument
-- count, then its arguments. KEYS: each operation's keys, in the same order.
-- Returns one element per operation: its script's reply (false for none), or an
-- error reply when its script raised an error; the operations after it still run,
-- and what it wrote before the error stays, as when its own script fails.
local out, k, a = {}, 1, 1
while a <= #ARGV do
  local op, nk, na = OPS[tonumber(ARGV[a])], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local ok, res = pcall(op, {unpack(KEYS, k, k + nk - 1)}, {unpack(ARGV, a + 3, a + 2 + na)})
  if not ok then
    if type(res) == 'table' and res.err then res = redis.error_reply(res.err) else res = redis.error_reply(tostring(res)) end
  elseif res == nil then
    res = false
  end
  out[#out + 1] = res
  k, a = k + nk, a + 3 + na
end
return out
