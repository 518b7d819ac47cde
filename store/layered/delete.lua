-- delete: remove a mirror in any state (admin invalidation, after the authority deleted the key).
-- KEYS[1] the mirror
-- Returns the number of keys removed.
return redis.call('DEL', KEYS[1])
