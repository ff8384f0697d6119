-- Prelude of the limits' scripts: `slowdown(key, now, recovery)` is the current factor (1 =
-- whole, grown back since the last cut) and the pause left (ms); `now_us` and `now` are
-- Redis's time.
local function slowdown(key, now, recovery)
  local s = redis.call('HMGET', key, 'factor', 'at', 'until')
  local factor = tonumber(s[1]) or 1
  local at = tonumber(s[2]) or now
  local pause = (tonumber(s[3]) or 0) - now
  factor = math.min(1, factor + (now - at) / recovery)
  if pause < 0 then pause = 0 end
  return factor, pause
end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
