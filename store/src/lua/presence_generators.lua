-- Drops the workers whose announcement expired; counts the able and the unable ones.
-- KEYS: 1 able workers, 2 unable workers, 3 the reason.
sweep(KEYS[1], KEYS[2])
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]), redis.call('GET', KEYS[3])}
