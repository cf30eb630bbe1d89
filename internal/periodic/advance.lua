-- advance.lua: move a schedule's progress forward, compare-and-set, and score it in the due
-- index by its next tick.
-- KEYS[1] the schedule's state hash (keys.ScheduleState), KEYS[2] the due index
-- (keys.SchedulesDue)
-- ARGV[1] the Last the caller read ("" when the hash had none), ARGV[2] the new Last (unix ms),
-- ARGV[3] the job enqueued ("" for none), ARGV[4] its tick (unix ms), ARGV[5] when (unix ms),
-- ARGV[6] the schedule's name, ARGV[7] the gen the caller read, ARGV[8] the next tick after the
-- new Last (unix ms; "" for none)
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
-- A definition changed or a pause since the caller's read: its writer indexed the schedule.
if (redis.call('HGET', KEYS[1], 'gen') or '') == ARGV[7] then
  if ARGV[8] == '' then
    redis.call('ZREM', KEYS[2], ARGV[6])
  else
    redis.call('ZADD', KEYS[2], ARGV[8], ARGV[6])
  end
end
return 1
