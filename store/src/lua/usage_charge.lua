-- Prelude of the scripts that end work: `charge(key, ttl, first)` adds the (field, value)
-- pairs from ARGV[first] on to the hash `key` and keeps it `ttl` seconds.
local function charge(key, ttl, first)
  for i = first, #ARGV, 2 do
    redis.call('HINCRBY', key, ARGV[i], ARGV[i + 1])
  end
  redis.call('EXPIRE', key, ttl)
end
