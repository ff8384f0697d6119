-- Releases a lease and announces it when it was held.
-- KEYS: 1 leases. ARGV: 1 lease id, 2 the freed channel, 3 the scope's name.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1
end
return 0
