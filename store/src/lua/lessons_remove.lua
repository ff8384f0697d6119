-- Removes a lesson with its counts (its uses are skipped as read).
-- Answers 1 removed, 0 it was not there.
-- KEYS: 1 lessons, 2 counts, 3 version. ARGV: 1 id.
local id = ARGV[1]
if redis.call('HDEL', KEYS[1], id) == 0 then return 0 end
redis.call('HDEL', KEYS[2], id .. ':r', id .. ':h', id .. ':c')
redis.call('INCR', KEYS[3])
return 1
