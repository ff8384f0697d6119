-- A worker is a session host until Redis's now + ttl.
-- KEYS: 1 the hosts, 2 this host's record. ARGV: 1 worker id, 2 ttl (ms), 3 its record (JSON).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
return 1
