-- Admits ids (all or none) or names the limit that refuses them: {verdict, amount}.
-- KEYS: 1 the in-flight set, 2... the period's usage hashes.
-- ARGV: 1 now (ms), 2 horizon (ms), 3 in-flight limit (-1: none), 4 token limit (-1),
-- 5 CPU ms limit (-1), 6 ttl, 7... ids.
local limit, tokens_limit, cpu_limit = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if limit >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2])
  local n = redis.call('ZCARD', KEYS[1])
  if n + (#ARGV - 6) > limit then return {'in_flight', n} end
end
if tokens_limit >= 0 or cpu_limit >= 0 then
  local tokens, cpu = 0, 0
  for i = 2, #KEYS do
    local v = redis.call('HMGET', KEYS[i], 'prompt_tokens', 'completion_tokens', 'sandbox_cpu_ms')
    tokens = tokens + (tonumber(v[1]) or 0) + (tonumber(v[2]) or 0)
    cpu = cpu + (tonumber(v[3]) or 0)
  end
  if tokens_limit >= 0 and tokens >= tokens_limit then return {'tokens', tokens} end
  if cpu_limit >= 0 and cpu >= cpu_limit then return {'cpu', cpu} end
end
if limit >= 0 then
  for i = 7, #ARGV do redis.call('ZADD', KEYS[1], ARGV[1], ARGV[i]) end
  redis.call('EXPIRE', KEYS[1], ARGV[6])
end
return {'ok', 0}
