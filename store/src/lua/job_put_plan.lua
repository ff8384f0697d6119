-- Starts a planned job, once: stores the plan, its dependency counters and the job's meta
-- (what planning spent), sets the status `running` unless it is final, and appends the
-- progress event. A plan stored already is left as it is (a task taken again).
-- KEYS: 1 plan, 2 pending, 3 done, 4 meta, 5 status, 6 events.
-- ARGV: 1 plan bytes, 2 ttl, 3 meta bytes, 4 event JSON or '', 5 max events, 6 the job events
-- channel, 7 job id, 8 the running status, 9 how many final statuses follow (n), 10..9+n the
-- final statuses, then (function, counter) pairs.
-- Returns stored (1/0) and the status after it.
local status = redis.call('GET', KEYS[5])
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) == false then return {0, status} end
redis.call('DEL', KEYS[2], KEYS[3])
local n = tonumber(ARGV[9])
for i = 10 + n, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('SET', KEYS[4], ARGV[3], 'EX', ARGV[2])
local final = false
for i = 10, 9 + n do
  if status == ARGV[i] then final = true end
end
if not final then
  redis.call('SET', KEYS[5], ARGV[8], 'EX', ARGV[2])
  status = ARGV[8]
end
if ARGV[4] ~= '' then
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[5], '*', 'data', ARGV[4])
  redis.call('EXPIRE', KEYS[6], ARGV[2])
  redis.call('PUBLISH', ARGV[6], ARGV[7])
end
return {1, status}
