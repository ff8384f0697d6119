-- Records an agent job's step at its index, with its progress event: only when the transcript
-- holds exactly that many steps (else another run of the job recorded this one first) and the
-- job has not ended. Answers {1, length, status} recorded, {0, length, status} taken,
-- {-1, length, status} ended (status '' when there is none).
-- KEYS: 1 steps, 2 status, 3 events.
-- ARGV: 1 index, 2 step bytes, 3 ttl, 4 event JSON, 5 max events, 6 the job events channel,
-- 7 job id, 8... the final statuses.
local status = redis.call('GET', KEYS[2]) or ''
local length = redis.call('LLEN', KEYS[1])
for i = 8, #ARGV do
  if status == ARGV[i] then return {-1, length, status} end
end
if length ~= tonumber(ARGV[1]) then return {0, length, status} end
redis.call('RPUSH', KEYS[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[5], '*', 'data', ARGV[4])
redis.call('EXPIRE', KEYS[3], ARGV[3])
redis.call('PUBLISH', ARGV[6], ARGV[7])
return {1, length + 1, status}
