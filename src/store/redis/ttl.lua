-- Prepended to the scripts that write a record (acquire, complete, extend): the key's TTL,
-- garbage collection only (every script checks the record's own times itself).
-- keep_until(key, ttl_ms): the key lives ttl_ms more milliseconds, or for ever when ttl_ms
-- is "0" (a record expiring past the latest TTL).
local function keep_until(key, ttl_ms)
  if ttl_ms ~= '0' then
    redis.call('PEXPIRE', key, ttl_ms)
  else
    redis.call('PERSIST', key)
  end
end
