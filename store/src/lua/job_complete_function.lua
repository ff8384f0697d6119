-- Marks a function done and decrements its dependants, atomically; on the first completion
-- appends the progress event (if any) and announces it.
-- KEYS: 1 done, 2 pending, 3 events.
-- ARGV: 1 function, 2 the plan's size, 3 ttl, 4 event JSON or '', 5 max events, 6 the job
-- events channel, 7 job id, 8... dependants.
local first = redis.call('SADD', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
if first == 1 and ARGV[4] ~= '' then
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[5], '*', 'data', ARGV[4])
  redis.call('EXPIRE', KEYS[3], ARGV[3])
  redis.call('PUBLISH', ARGV[6], ARGV[7])
end
local ready = {}
for i = 8, #ARGV do
  local d = ARGV[i]
  if first == 1 then
    if redis.call('HINCRBY', KEYS[2], d, -1) == 0 then table.insert(ready, d) end
  else
    local n = tonumber(redis.call('HGET', KEYS[2], d) or '1')
    if n <= 0 and redis.call('SISMEMBER', KEYS[1], d) == 0 then table.insert(ready, d) end
  end
end
local all = 0
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then all = 1 end
return {first, all, ready}
