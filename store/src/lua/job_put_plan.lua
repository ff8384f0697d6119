-- Stores the plan and its dependency counters, once.
-- KEYS: 1 plan, 2 pending, 3 done. ARGV: 1 plan bytes, 2 ttl, 3... (function, counter).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) == false then return 0 end
redis.call('DEL', KEYS[2], KEYS[3])
for i = 3, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
redis.call('EXPIRE', KEYS[2], ARGV[2])
return 1
