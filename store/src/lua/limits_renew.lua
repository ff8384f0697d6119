-- Extends the leases still held (`XX`).
-- KEYS: 1 leases. ARGV: 1 ttl (ms), 2... lease ids.
local t = redis.call('TIME')
local ttl = tonumber(ARGV[1])
local expires = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ttl)
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', expires, ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], 2 * ttl)
return 1
