-- Keeps a session's checkpoint, taken by the worker that holds it (while it still does).
-- KEYS: 1 the session's hash, 2 its checkpoint.
-- ARGV: 1 the worker, 2 mode ('save' or 'unavailable'), 3 now (ms);
--   save: 4 cells, 5 has state ('1'/'0'), 6 state, 7 has files, 8 files, 9 unrestorable
--         (JSON), 10 bytes, 11 the calls of its last cells (JSON);
--   unavailable: 4 why.
-- A part left out ('0') is unchanged since the last save, which must then hold it.
-- Returns 1 when kept, 0 when the session is not live on this worker (it ended, or another
-- worker restored it), -1 when a part left out is not there (the caller sends both).
if redis.call('HGET', KEYS[1], 'state') ~= 'live' or redis.call('HGET', KEYS[1], 'host') ~= ARGV[1] then
  return 0
end
local expires = tonumber(redis.call('HGET', KEYS[1], 'expires_ms') or '0')
if ARGV[2] == 'unavailable' then
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], 'unavailable', ARGV[4], 'taken_ms', ARGV[3])
else
  if (ARGV[5] == '0' and redis.call('HEXISTS', KEYS[2], 'state') == 0)
      or (ARGV[7] == '0' and redis.call('HEXISTS', KEYS[2], 'files') == 0) then
    return -1
  end
  redis.call('HDEL', KEYS[2], 'unavailable')
  if ARGV[5] == '1' then
    redis.call('HSET', KEYS[2], 'state', ARGV[6])
  end
  if ARGV[7] == '1' then
    redis.call('HSET', KEYS[2], 'files', ARGV[8])
  end
  redis.call('HSET', KEYS[2], 'cells', ARGV[4], 'unrestorable', ARGV[9], 'bytes', ARGV[10],
    'taken_ms', ARGV[3], 'calls', ARGV[11])
end
-- Kept a minute past the session's lifetime at most; the session's end removes it sooner.
redis.call('PEXPIREAT', KEYS[2], string.format('%.0f', expires + 60000))
return 1
