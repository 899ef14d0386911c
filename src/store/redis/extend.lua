-- Moves the lease end of KEYS[1] if it is in progress under ARGV[1]. ARGV: owner, lease_ms,
-- expiration_secs, ttl_ms ("0": no TTL). Answers 1 (applied) or 0 (the lease is lost).
local key = KEYS[1]
local r = redis.call('HMGET', key, 'status', 'lease_owner')
if r[1] == 'INPROGRESS' and r[2] == ARGV[1] then
  redis.call('HSET', key, 'in_progress_expiration', ARGV[2], 'expiration', ARGV[3])
  keep_until(key, ARGV[4])
  return 1
end
return 0
