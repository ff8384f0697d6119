-- Stores an execution's verdict once, charging its tenant (`charge`, from usage_charge.lua,
-- comes first) and making its execution batch's webhook due after the batch's last verdict;
-- notifies waiters either way.
-- KEYS: 1 result, 2 usage bucket, 3 the tenant's executions in flight, 4 the execution's
-- batch link, 5 the due webhooks.
-- ARGV: 1 result bytes, 2 ttl, 3 the done channel, 4 execution id, 5 usage ttl, 6 now (ms),
-- 7 the execution batch webhooks' key prefix, 8 their due member prefix, 9... (field, n).
-- The batch's id is only known here (read from the link), hence the prefixes 7 and 8.
redis.call('ZREM', KEYS[3], ARGV[4])
local stored = 0
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then
  stored = 1
  charge(KEYS[2], ARGV[5], 9)
  local batch = redis.call('GET', KEYS[4])
  if batch then
    local hook = ARGV[7] .. batch
    if redis.call('EXISTS', hook) == 1 and redis.call('HINCRBY', hook, 'left', -1) == 0 then
      redis.call('HSET', hook, 'state', 'pending', 'since', ARGV[6])
      redis.call('ZADD', KEYS[5], ARGV[6], ARGV[8] .. batch)
    end
  end
end
redis.call('PUBLISH', ARGV[3], ARGV[4])
return stored
