-- Stores a function's final outcome, with the progress event of its last attempt, and
-- completes the function in its plan (`complete`) in the same step: a final outcome is never
-- stored without its dependants' counters going down. Nothing is stored or completed when a
-- final outcome stands already (the run that stored it completes it); nothing is completed
-- when the job's status is final. It applies the effects it is given (`store::dag`, the one
-- copy of the rule) while the job runs: the dependants to release, and whether the job
-- integrates now or when this is the last function, setting `integrating` in the same step.
-- Once the job integrates, a function finishing releases nothing.
-- KEYS: 1 outcome, 2 final marker, 3 status, 4 events, 5 done, 6 pending.
-- ARGV: 1 outcome bytes, 2 ttl, 3 attempt event JSON or '', 4 done event JSON or '', 5 max
-- events, 6 the job events channel, 7 job id, 8 function, 9 the plan's size, 10 when it
-- integrates ('now' or 'last'), 11 the integrating status, 12 how many final statuses follow
-- (n), 13..12+n the final statuses, then the dependants to release.
-- Returns stored (1/0), the status after it, then first (-1: not completed), all, ready.
local status = redis.call('GET', KEYS[3])
if redis.call('EXISTS', KEYS[2]) == 1 then return {0, status, -1, 0, {}} end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('SET', KEYS[2], '1', 'EX', ARGV[2])
if ARGV[3] ~= '' then
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[5], '*', 'data', ARGV[3])
  redis.call('EXPIRE', KEYS[4], ARGV[2])
  redis.call('PUBLISH', ARGV[6], ARGV[7])
end
local n = tonumber(ARGV[12])
for i = 13, 12 + n do
  if status == ARGV[i] then return {1, status, -1, 0, {}} end
end
local integrating = status == ARGV[11]
local dependants = {}
if not integrating then
  for i = 13 + n, #ARGV do table.insert(dependants, ARGV[i]) end
end
local first, all, ready = complete(
  {done = KEYS[5], pending = KEYS[6], events = KEYS[4]},
  {name = ARGV[8], size = ARGV[9], ttl = ARGV[2], event = ARGV[4], max_events = ARGV[5],
   channel = ARGV[6], job = ARGV[7]},
  dependants)
if not integrating and (ARGV[10] == 'now' or all == 1) then
  redis.call('SET', KEYS[3], ARGV[11], 'EX', ARGV[2])
  status = ARGV[11]
end
return {1, status, first, all, ready}
