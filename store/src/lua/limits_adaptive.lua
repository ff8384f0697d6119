-- Reads the adaptive limit's state with the leases held now (expired ones dropped).
-- KEYS: 1 adaptive, 2 leases. Returns {state or false, version, leases held}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local s = redis.call('HMGET', KEYS[1], 'state', 'version')
return {s[1], tonumber(s[2]) or 0, redis.call('ZCARD', KEYS[2])}
