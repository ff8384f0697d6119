-- Reads a function cache entry and counts the lookup as a hit or a miss.
-- KEYS: 1 the entry, 2 the counters. ARGV: 1 the hit counter, 2 the miss counter.
local v = redis.call('GET', KEYS[1])
if v then redis.call('HINCRBY', KEYS[2], ARGV[1], 1) else redis.call('HINCRBY', KEYS[2], ARGV[2], 1) end
return v
