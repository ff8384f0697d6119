-- Defines `sweep(able, unable)`: drops the workers whose announcement expired (on Redis's
-- clock). Put before the scripts that read who is alive (`presence.rs`).
local function sweep(able, unable)
  local t = redis.call('TIME')
  local now = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  redis.call('ZREMRANGEBYSCORE', able, '-inf', now)
  redis.call('ZREMRANGEBYSCORE', unable, '-inf', now)
end
