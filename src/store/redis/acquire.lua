-- Takes the lease on KEYS[1] (a hash: the record), or answers the record that holds it.
-- ARGV: owner, now_ms, now_secs, lease_ms, expiration_secs, ttl_ms ("0": no TTL),
--       has_validation ("1"/"0"), validation.
-- Answers {"acquired"}, or {"existing", field, value, ...}. Times come from the caller, never
-- from the server's clock: the key's TTL is garbage collection, not the record's expiry.
-- A hash the store did not write (no status, times that are not integers) is answered as
-- it is, never taken over unless expired; the client reports it malformed.
local key = KEYS[1]
local function int(v)
  if v and string.match(v, '^%d+$') then return tonumber(v) end
  return nil
end
local r = redis.call('HMGET', key, 'status', 'expiration', 'in_progress_expiration',
  'lease_owner')
if redis.call('EXISTS', key) == 1 then
  local expiration, lease = int(r[2]), int(r[3])
  local expired = expiration ~= nil and expiration < tonumber(ARGV[3])
  local elapsed = r[1] == 'INPROGRESS' and lease ~= nil and lease < tonumber(ARGV[2])
  if not (expired or elapsed) then
    if r[1] == 'INPROGRESS' and r[4] == ARGV[1] then
      -- Sent again after a lost answer: the lease is already ours.
      return {'acquired'}
    end
    local existing = redis.call('HGETALL', key)
    table.insert(existing, 1, 'existing')
    return existing
  end
  redis.call('DEL', key)
end
redis.call('HSET', key, 'status', 'INPROGRESS', 'expiration', ARGV[5],
  'in_progress_expiration', ARGV[4], 'lease_owner', ARGV[1])
if ARGV[7] == '1' then
  redis.call('HSET', key, 'validation', ARGV[8])
end
keep_until(key, ARGV[6])
return {'acquired'}
