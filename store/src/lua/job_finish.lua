-- Finishes a job once: its result, its `finished` event, its final status, its tenant's usage
-- charge (`charge`, from usage_charge.lua, comes first), its webhooks made due.
-- KEYS: 1 result, 2 events, 3 status, 4 unfinished jobs, 5 usage bucket, 6 the tenant's jobs
-- in flight, 7 the job's webhook, 8 the due webhooks, 9 the job's batch link.
-- ARGV: 1 result bytes, 2 ttl, 3 event JSON, 4 status, 5 job id, 6 max events, 7 usage ttl,
-- 8 now (ms), 9 the batch webhooks' key prefix, 10 the job events channel, 11 the batches'
-- channel, 12 the job's due member, 13 the batches' due member prefix, 14... (field, n).
-- The batch's id is only known here (read from the link), hence the prefixes 9 and 13.
redis.call('ZREM', KEYS[4], ARGV[5])
redis.call('ZREM', KEYS[6], ARGV[5])
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) == false then return 0 end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[6], '*', 'data', ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('SET', KEYS[3], ARGV[4], 'EX', ARGV[2])
redis.call('PUBLISH', ARGV[10], ARGV[5])
charge(KEYS[5], ARGV[7], 14)
if redis.call('EXISTS', KEYS[7]) == 1 then
  redis.call('HSET', KEYS[7], 'state', 'pending', 'since', ARGV[8])
  redis.call('ZADD', KEYS[8], ARGV[8], ARGV[12])
end
local batch = redis.call('GET', KEYS[9])
if batch then
  redis.call('PUBLISH', ARGV[11], batch)
  local hook = ARGV[9] .. batch
  if redis.call('EXISTS', hook) == 1 and redis.call('HINCRBY', hook, 'left', -1) == 0 then
    redis.call('HSET', hook, 'state', 'pending', 'since', ARGV[8])
    redis.call('ZADD', KEYS[8], ARGV[8], ARGV[13] .. batch)
  end
end
return 1
