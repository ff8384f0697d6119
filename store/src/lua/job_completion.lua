-- complete(k, a, dependants): marks function a.name done in its job's plan, atomically. On its
-- first completion each dependant's counter goes down and those that reach 0 are ready: handed
-- to this caller only; the progress event a.event (unless '') is appended and announced. On a
-- repeat, the dependants whose counters are down and that are not done are answered again, so
-- a caller that stopped before publishing them is followed by one that publishes what it did
-- not (the published set tells which).
-- A function that failed releases none of its dependants (the caller passes none): they cannot
-- be built on it, and the job goes to its integration instead.
-- k: done, pending, events (keys). a: name, size (the plan's), ttl, event, max_events,
-- channel (the job events'), job (its id).
-- Returns first (1/0), all (1 when every function of the plan is done), ready.
local function complete(k, a, dependants)
  local first = redis.call('SADD', k.done, a.name)
  redis.call('EXPIRE', k.done, a.ttl)
  if first == 1 and a.event ~= '' then
    redis.call('XADD', k.events, 'MAXLEN', '~', a.max_events, '*', 'data', a.event)
    redis.call('EXPIRE', k.events, a.ttl)
    redis.call('PUBLISH', a.channel, a.job)
  end
  redis.call('EXPIRE', k.pending, a.ttl)
  local ready = {}
  for _, d in ipairs(dependants) do
    if first == 1 then
      if redis.call('HINCRBY', k.pending, d, -1) == 0 then table.insert(ready, d) end
    else
      local n = tonumber(redis.call('HGET', k.pending, d) or '1')
      if n <= 0 and redis.call('SISMEMBER', k.done, d) == 0 then table.insert(ready, d) end
    end
  end
  local all = 0
  if redis.call('SCARD', k.done) >= tonumber(a.size) then all = 1 end
  return first, all, ready
end
