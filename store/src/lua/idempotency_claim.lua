-- Claims an idempotency key, or returns what the request that claimed it first left.
-- KEYS: 1 the key. ARGV: 1 the claim (JSON), 2 ttl (ms).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
return redis.call('GET', KEYS[1])
