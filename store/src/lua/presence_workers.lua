-- Drops the workers whose announcement expired; lists the live ones, able first.
-- KEYS: 1 able workers, 2 unable workers.
sweep(KEYS[1], KEYS[2])
return {redis.call('ZRANGE', KEYS[1], 0, -1), redis.call('ZRANGE', KEYS[2], 0, -1)}
