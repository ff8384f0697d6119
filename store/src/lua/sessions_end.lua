-- Ends a live session, once: the first ending wins.
-- KEYS: 1 the session's hash, 2 the tenant's live sessions, 3 the deadlines, 4 its
-- checkpoint (removed: nothing of an ended session is kept but its record).
-- ARGV: 1 id, 2 the state it ends in, 3 why, 4 what (its cause's label), 5 how long the
-- record is kept (ms).
-- Returns 1 when this call ended it, 0 when it was not live.
if redis.call('HGET', KEYS[1], 'state') ~= 'live' then
  return 0
end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'ended_reason', ARGV[3], 'ended_by', ARGV[4])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('DEL', KEYS[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
