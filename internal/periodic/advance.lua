-- advance.lua: move a schedule's progress forward, compare-and-set.
-- KEYS[1] the schedule's state hash (keys.ScheduleState)
-- ARGV[1] the Last the caller read ("" when the hash had none), ARGV[2] the new Last (unix ms),
-- ARGV[3] the job enqueued ("" for none), ARGV[4] its tick (unix ms), ARGV[5] when (unix ms)
-- Returns 1 when moved, 0 when Last is no longer ARGV[1] (another scheduler moved it) or the
-- schedule was deleted meanwhile.
local cur = redis.call('HGET', KEYS[1], 'last')
if (cur or '') ~= ARGV[1] or not cur then
  return 0
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'last', ARGV[2], 'job', ARGV[3], 'tick', ARGV[4], 'at', ARGV[5])
else
  redis.call('HSET', KEYS[1], 'last', ARGV[2])
end
return 1
