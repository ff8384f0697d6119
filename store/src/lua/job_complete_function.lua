-- Completes a function whose final outcome is stored (`complete`): what a task taken again
-- after its step stored the outcome calls, to publish what the first run may not have.
-- KEYS: 1 done, 2 pending, 3 events.
-- ARGV: 1 function, 2 the plan's size, 3 ttl, 4 event JSON or '', 5 max events, 6 the job
-- events channel, 7 job id, 8... dependants.
local dependants = {}
for i = 8, #ARGV do table.insert(dependants, ARGV[i]) end
local first, all, ready = complete(
  {done = KEYS[1], pending = KEYS[2], events = KEYS[3]},
  {name = ARGV[1], size = ARGV[2], ttl = ARGV[3], event = ARGV[4], max_events = ARGV[5],
   channel = ARGV[6], job = ARGV[7]},
  dependants)
return {first, all, ready}
