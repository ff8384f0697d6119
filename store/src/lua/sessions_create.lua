-- A new live session, if its tenant is below its quota of live sessions.
-- KEYS: 1 the session's hash, 2 the tenant's live sessions, 3 the tenant's sessions,
--       4 the deadlines.
-- ARGV: 1 quota (0: none), 2 id, 3 created (ms), 4 deadline (ms), 5.. field, value pairs.
-- Returns {1, live sessions now} or {0, live sessions} when the quota is reached.
local live = redis.call('ZCARD', KEYS[2])
local quota = tonumber(ARGV[1])
if quota > 0 and live >= quota then
  return {0, live}
end
for i = 5, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
redis.call('ZADD', KEYS[4], ARGV[4], ARGV[2])
return {1, live + 1}
