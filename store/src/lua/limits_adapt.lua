-- Writes the adaptive limit's state if nobody wrote since it was read (compare and set).
-- KEYS: 1 adaptive. ARGV: 1 the version read, 2 the state, 3 ttl (ms).
-- Returns 1 when written, 0 when another write came first (read again).
local version = tonumber(redis.call('HGET', KEYS[1], 'version')) or 0
if version ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'version', version + 1)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
