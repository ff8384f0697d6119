-- A call reached a live session: it was used now (and ran a cell, when ARGV[2] is not 0);
-- a call starting a cell says until when it may run (ARGV[4], 0: none), so that the session
-- cannot idle out under a running cell.
-- KEYS: 1 the session's hash, 2 the deadlines. ARGV: 1 now (ms), 2 cells to add, 3 id,
-- 4 busy until (ms).
-- Returns 0 when the session is not live (it ended meanwhile).
if redis.call('HGET', KEYS[1], 'state') ~= 'live' then
  return 0
end
local now = tonumber(ARGV[1])
local last = tonumber(redis.call('HGET', KEYS[1], 'last_used_ms') or '0')
if now > last then
  redis.call('HSET', KEYS[1], 'last_used_ms', ARGV[1])
  last = now
end
if ARGV[2] ~= '0' then
  redis.call('HINCRBY', KEYS[1], 'cells', ARGV[2])
end
local busy = tonumber(redis.call('HGET', KEYS[1], 'busy_until_ms') or '0')
if tonumber(ARGV[4]) > busy then
  busy = tonumber(ARGV[4])
  redis.call('HSET', KEYS[1], 'busy_until_ms', ARGV[4])
end
local idle = tonumber(redis.call('HGET', KEYS[1], 'idle_timeout_s') or '0') * 1000
local expires = tonumber(redis.call('HGET', KEYS[1], 'expires_ms') or '0')
local deadline = math.min(math.max(last, busy) + idle, expires)
redis.call('ZADD', KEYS[2], string.format('%.0f', deadline), ARGV[3])
return 1
