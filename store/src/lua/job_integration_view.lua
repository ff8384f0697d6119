-- The integration's reads: the four values, then (function, outcome) for every function of
-- the plan (`pending` has one field per function, kept once its counter is down to 0).
-- KEYS: 1 meta, 2 status, 3 plan, 4 result, 5 pending.
-- ARGV: 1 the function outcomes' key prefix (a name is only known here, from `pending`).
local out = redis.call('MGET', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
for _, name in ipairs(redis.call('HKEYS', KEYS[5])) do
  table.insert(out, name)
  table.insert(out, redis.call('GET', ARGV[1] .. name))
end
return out
