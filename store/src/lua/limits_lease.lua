-- Takes a lease (after limits_slowdown.lua). Returns {granted, wait ms}; {0, -1}: the lease
-- left is reserved for other tenants.
-- KEYS: 1 leases, 2 slow, 3 askers.
-- ARGV: 1 lease id, 2 limit, 3 ttl (ms), 4 recovery (ms), 5 tenant, 6 reserve, 7 asker
-- window (ms).
local factor, pause = slowdown(KEYS[2], now, tonumber(ARGV[4]))
if pause > 0 then return {0, pause} end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local limit = math.max(1, math.floor(tonumber(ARGV[2]) * factor))
local reserve = math.min(tonumber(ARGV[6]), math.floor(limit / 4))
local window = tonumber(ARGV[7])
local tenant = ARGV[5]
if reserve > 0 then
  redis.call('ZADD', KEYS[3], now, tenant)
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - window)
  redis.call('PEXPIRE', KEYS[3], 2 * window)
end
local held = redis.call('ZCARD', KEYS[1])
if held >= limit then return {0, 0} end
if reserve > 0 and held >= limit - reserve and redis.call('ZCARD', KEYS[3]) > 1 then
  local prefix = tenant .. '/'
  local mine = 0
  for _, lease in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    if string.sub(lease, 1, #prefix) == prefix then mine = mine + 1 end
  end
  if mine >= reserve then return {0, -1} end
end
local ttl = tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], string.format('%.0f', now + ttl), ARGV[1])
redis.call('PEXPIRE', KEYS[1], 2 * ttl)
return {1, 0}
