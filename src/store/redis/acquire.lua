-- Takes the lease on KEYS[1] (a hash: the record), or answers the record that holds it.
-- ARGV: owner, now_ms, now_secs, lease_ms, expiration_secs, gc_at_ms ("0": no TTL),
--       has_validation ("1"/"0"), validation.
-- Answers {"acquired"}, or {"existing", field, value, ...}. Times come from the caller, never
-- from the server's clock: the key's TTL is garbage collection, not the record's expiry.
local key = KEYS[1]
local status = redis.call('HGET', key, 'status')
if status then
  local expiration = tonumber(redis.call('HGET', key, 'expiration') or '')
  local lease = tonumber(redis.call('HGET', key, 'in_progress_expiration') or '')
  local expired = expiration ~= nil and expiration < tonumber(ARGV[3])
  local elapsed = status == 'INPROGRESS' and lease ~= nil and lease < tonumber(ARGV[2])
  if not (expired or elapsed) then
    if status == 'INPROGRESS' and redis.call('HGET', key, 'lease_owner') == ARGV[1] then
      -- Sent again after a lost answer: the lease is already ours.
      return {'acquired'}
    end
    local existing = redis.call('HGETALL', key)
    table.insert(existing, 1, 'existing')
    return existing
  end
end
redis.call('DEL', key)
redis.call('HSET', key, 'status', 'INPROGRESS', 'expiration', ARGV[5],
  'in_progress_expiration', ARGV[4], 'lease_owner', ARGV[1])
if ARGV[7] == '1' then
  redis.call('HSET', key, 'validation', ARGV[8])
end
if ARGV[6] ~= '0' then
  redis.call('PEXPIREAT', key, ARGV[6])
end
return {'acquired'}
