-- Stores an outcome unless the final one is stored, with its progress event if any; answers
-- whether it stored it and the job's status. (A final outcome goes through
-- job_finish_function.lua, which completes the function with it.)
-- KEYS: 1 outcome, 2 final marker, 3 status, 4 events.
-- ARGV: 1 outcome bytes, 2 ttl, 3 event JSON or '', 4 max events, 5 the job events channel,
-- 6 job id.
local status = redis.call('GET', KEYS[3])
if redis.call('EXISTS', KEYS[2]) == 1 then return {0, status} end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
if ARGV[3] ~= '' then
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[4], '*', 'data', ARGV[3])
  redis.call('EXPIRE', KEYS[4], ARGV[2])
  redis.call('PUBLISH', ARGV[5], ARGV[6])
end
return {1, status}
