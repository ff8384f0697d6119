-- A worker restored a session whose worker was lost: the session is its now, unless it ended
-- or another worker restored it first.
-- KEYS: 1 the session's hash. ARGV: 1 the lost worker, 2 the new one, 3 its URL, 4 the
-- restore (JSON).
-- Returns 1 when this worker holds it now, 0 otherwise.
if redis.call('HGET', KEYS[1], 'state') ~= 'live' or redis.call('HGET', KEYS[1], 'host') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'host', ARGV[2], 'host_url', ARGV[3], 'last_restore', ARGV[4])
redis.call('HINCRBY', KEYS[1], 'restores', 1)
return 1
