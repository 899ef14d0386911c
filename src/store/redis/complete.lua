-- Completes KEYS[1] if it is in progress under ARGV[1] (owner-fenced). ARGV: owner, status,
-- data, expiration_secs, ttl_ms ("0": no TTL). Answers 1 (applied: now, or by an earlier
-- send whose answer was lost) or 0 (the lease is lost).
local key = KEYS[1]
local r = redis.call('HMGET', key, 'status', 'lease_owner', 'data')
if r[1] == 'INPROGRESS' and r[2] == ARGV[1] then
  redis.call('HSET', key, 'status', ARGV[2], 'data', ARGV[3], 'expiration', ARGV[4])
  redis.call('HDEL', key, 'in_progress_expiration')
  keep_until(key, ARGV[5])
  return 1
end
if r[1] == ARGV[2] and r[2] == ARGV[1] and r[3] == ARGV[3] then
  return 1
end
return 0
