-- Stores an outcome unless the final one is stored, with its progress event if any; answers
-- whether it stored it and the job's status. With ARGV 8 on, the pipeline event goes to the
-- coordinators' inbox (stored or not) unless the job's status is final.
-- KEYS: 1 outcome, 2 final marker, 3 status, 4 events, [5 the coordinators' inbox].
-- ARGV: 1 outcome bytes, 2 ttl, 3 '1' when this outcome is final, 4 event JSON or '', 5 max
-- events, 6 the job events channel, 7 job id, [8 pipeline event bytes, 9 the inbox's notice
-- channel, 10... the final statuses].
local status = redis.call('GET', KEYS[3])
local function announce()
  if ARGV[8] == nil then return end
  for i = 10, #ARGV do
    if status == ARGV[i] then return end
  end
  redis.call('XADD', KEYS[5], '*', 'data', ARGV[8])
  redis.call('PUBLISH', ARGV[9], '1')
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  announce()
  return {0, status}
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
if ARGV[3] == '1' then redis.call('SET', KEYS[2], '1', 'EX', ARGV[2]) end
if ARGV[4] ~= '' then
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[5], '*', 'data', ARGV[4])
  redis.call('EXPIRE', KEYS[4], ARGV[2])
  redis.call('PUBLISH', ARGV[6], ARGV[7])
end
announce()
return {1, status}
