-- Takes up to max due webhooks, each leased (its score moved to the lease's end).
-- KEYS: 1 the due set. ARGV: 1 now (ms), 2 lease (ms), 3 max.
local due = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, ARGV[3])
for _, member in ipairs(due) do
  redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[2]), member)
end
return due
