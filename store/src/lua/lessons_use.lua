-- Counts one use of a lesson: a repair was shown it and passed (ARGV 2 = 1) or did not; keeps
-- the use at the head of the set's latest ones; retires the lesson once it has been shown
-- `retire_after` times without one of them passing (0: never).
-- Answers 1 counted, 2 counted and retired, 0 no such lesson (removed meanwhile).
-- KEYS: 1 lessons, 2 counts, 3 uses, 4 version.
-- ARGV: 1 id, 2 passed (0/1), 3 use bytes (MessagePack), 4 uses kept, 5 retire_after.
local id = ARGV[1]
if redis.call('HEXISTS', KEYS[1], id) == 0 then return 0 end
local r = redis.call('HINCRBY', KEYS[2], id .. ':r', 1)
local h = tonumber(redis.call('HGET', KEYS[2], id .. ':h') or '0')
if ARGV[2] == '1' then h = redis.call('HINCRBY', KEYS[2], id .. ':h', 1) end
redis.call('LPUSH', KEYS[3], ARGV[3])
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[4]) - 1)
local retire_after = tonumber(ARGV[5])
if retire_after > 0 and r >= retire_after and h == 0 then
  redis.call('HDEL', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id .. ':r', id .. ':h', id .. ':c')
  redis.call('INCR', KEYS[4])
  return 2
end
return 1
