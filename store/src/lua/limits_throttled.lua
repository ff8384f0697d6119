-- A provider pushed back (after limits_slowdown.lua): halves the factor (at most once per
-- debounce window), extends the pause, announces it (the scope's name and the ms left), and
-- returns the factor in thousandths.
-- KEYS: 1 slow.
-- ARGV: 1 pause (ms), 2 recovery (ms), 3 debounce (ms), 4 min factor, 5 the paused channel,
-- 6 the scope's name.
local recovery = tonumber(ARGV[2])
local factor = slowdown(KEYS[1], now, recovery)
local cut = tonumber(redis.call('HGET', KEYS[1], 'cut')) or 0
if now - cut >= tonumber(ARGV[3]) then
  factor = math.max(tonumber(ARGV[4]), factor / 2)
  redis.call('HSET', KEYS[1], 'cut', string.format('%.0f', now))
end
local until_ = math.max(tonumber(redis.call('HGET', KEYS[1], 'until')) or 0, now + tonumber(ARGV[1]))
redis.call('HSET', KEYS[1], 'factor', string.format('%.4f', factor),
  'at', string.format('%.0f', now), 'until', string.format('%.0f', until_))
redis.call('PEXPIRE', KEYS[1], 2 * recovery + tonumber(ARGV[1]))
redis.call('PUBLISH', ARGV[5], ARGV[6] .. ' ' .. string.format('%.0f', until_ - now))
return math.floor(factor * 1000)
