-- Forgets the inbox's readers that hold no event and have been idle long enough; one script,
-- so a reader cannot take an event between the check that it holds none and its removal.
-- KEYS: 1 the stream. ARGV: 1 the group, 2 idle (ms), 3 the caller's name (kept).
local ok, readers = pcall(redis.call, 'XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if not ok then return 0 end
local removed = 0
for _, reader in ipairs(readers) do
  local f = {}
  for i = 1, #reader, 2 do f[reader[i]] = reader[i + 1] end
  if f['name'] ~= ARGV[3] and tonumber(f['pending']) == 0
      and tonumber(f['idle']) >= tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    removed = removed + 1
  end
end
return removed
