-- The live session hosts' records: drops the expired first.
-- KEYS: 1 the hosts. ARGV: 1 the beginning of a host record's key.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
local out = {}
for _, id in ipairs(ids) do
  local record = redis.call('GET', ARGV[1] .. id)
  if record then
    table.insert(out, record)
  end
end
return out
