-- Sets a status unless the current one is final.
-- KEYS: 1 status. ARGV: 1 status, 2 ttl, 3... the final statuses.
local current = redis.call('GET', KEYS[1])
for i = 3, #ARGV do
  if current == ARGV[i] then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return 1
