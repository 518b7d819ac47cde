-- delete: remove a record in any state (admin invalidation). The fence counter stays.
-- KEYS[1] the record
-- Returns {'1'} when there was a record, else {'0'}.
return {tostring(redis.call('DEL', KEYS[1]))}
