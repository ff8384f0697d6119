-- Adds a lesson to a set unless the set has it, then evicts the least useful lessons until
-- the set is within its count and byte bounds. Usefulness: (helped + 1) / (retrieved + 2),
-- the oldest first among equals; the lesson just added is never evicted by its own add.
-- Answers {1, evicted} added, {0, 0} already there, {-1, 0} larger than the byte bound alone.
-- KEYS: 1 lessons, 2 counts, 3 version.
-- ARGV: 1 id, 2 lesson bytes (MessagePack), 3 max count, 4 max bytes, 5 created (ms), kept
-- in the counts as `{id}:c` for the order of eviction.
local id, body = ARGV[1], ARGV[2]
local max_count, max_bytes = tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call('HEXISTS', KEYS[1], id) == 1 then return {0, 0} end
if #body > max_bytes then return {-1, 0} end
redis.call('HSET', KEYS[1], id, body)
redis.call('HSET', KEYS[2], id .. ':c', ARGV[5])
local evicted = 0
while true do
  local ids = redis.call('HKEYS', KEYS[1])
  local bytes = 0
  for _, other in ipairs(ids) do bytes = bytes + redis.call('HSTRLEN', KEYS[1], other) end
  if #ids <= max_count and bytes <= max_bytes then break end
  local worst, worst_score, worst_created = nil, nil, nil
  for _, other in ipairs(ids) do
    if other ~= id then
      local r = tonumber(redis.call('HGET', KEYS[2], other .. ':r') or '0')
      local h = tonumber(redis.call('HGET', KEYS[2], other .. ':h') or '0')
      local score = (h + 1) / (r + 2)
      local created = tonumber(redis.call('HGET', KEYS[2], other .. ':c') or '0')
      if worst == nil or score < worst_score or (score == worst_score and created < worst_created) then
        worst, worst_score, worst_created = other, score, created
      end
    end
  end
  if worst == nil then break end
  redis.call('HDEL', KEYS[1], worst)
  redis.call('HDEL', KEYS[2], worst .. ':r', worst .. ':h', worst .. ':c')
  evicted = evicted + 1
end
redis.call('INCR', KEYS[3])
return {1, evicted}
