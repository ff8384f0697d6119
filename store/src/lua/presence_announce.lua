-- A worker is alive until Redis's now + ttl, able to generate or not (and why not), and
-- says what it holds.
-- KEYS: 1 able workers, 2 unable workers, 3 the reason, 4 its status.
-- ARGV: 1 worker id, 2 ttl (ms), 3 why it cannot generate ('': it can), 4 its status ('':
-- none).
local t = redis.call('TIME')
local expires = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2]))
if ARGV[3] == '' then
  redis.call('ZADD', KEYS[1], expires, ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[2], expires, ARGV[1])
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[2])
end
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[4], ARGV[4], 'PX', ARGV[2])
end
return 1
