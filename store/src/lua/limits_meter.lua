-- GCRA (after limits_slowdown.lua). Returns {granted, wait ms}.
-- KEYS: 1 meter, 2 slow.
-- ARGV: 1 µs per unit, 2 burst units, 3 cost, 4 force ('1'), 5 recovery (ms).
local factor, pause = slowdown(KEYS[2], now, tonumber(ARGV[5]))
local force = ARGV[4] == '1'
if pause > 0 and not force then return {0, pause} end
local interval = tonumber(ARGV[1]) / factor
local tat = tonumber(redis.call('GET', KEYS[1])) or now_us
if tat < now_us then tat = now_us end
local new_tat = tat + tonumber(ARGV[3]) * interval
local allow_at = new_tat - tonumber(ARGV[2]) * interval
if allow_at > now_us and not force then
  return {0, math.ceil((allow_at - now_us) / 1000)}
end
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', math.ceil((new_tat - now_us) / 1000) + 1000)
return {1, 0}
