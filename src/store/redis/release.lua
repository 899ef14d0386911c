-- Deletes KEYS[1] if it is in progress under ARGV[1]. Answers 1 (applied) or 0 (the lease is
-- lost).
local key = KEYS[1]
local r = redis.call('HMGET', key, 'status', 'lease_owner')
if r[1] == 'INPROGRESS' and r[2] == ARGV[1] then
  redis.call('DEL', key)
  return 1
end
return 0
