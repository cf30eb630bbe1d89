-- put.lua: store a schedule's definition, in one step with its indexes and the bound on how
-- many there are.
-- KEYS[1] the definitions hash, KEYS[2] the schedule's state hash, KEYS[3] the set of paused
-- schedules, KEYS[4] the due index (keys.SchedulesDue), KEYS[5] the names (keys.SchedulesNames)
-- ARGV[1] the name, ARGV[2] the definition's JSON, ARGV[3] now (unix ms), ARGV[4] the most
-- schedules that may be stored, ARGV[5] the first tick after now (unix ms; "" for none)
-- Returns 1 when stored, -1 when the schedule is new and ARGV[4] are stored already.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then
  return -1
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
-- A schedule new to Redis starts now: its ticks before are not missed ones.
local new = redis.call('HSETNX', KEYS[2], 'last', ARGV[3])
redis.call('HINCRBY', KEYS[2], 'gen', 1)
redis.call('ZADD', KEYS[5], 0, ARGV[1])
-- A new schedule is due at its first tick after now. One stored again keeps its Last, from
-- which its next tick is not Lua's to compute: it is due now, and the next scheduler's pass
-- reads it and scores it by its next tick. A paused schedule is not indexed.
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 0 then
  local score = 0
  if new == 1 and ARGV[5] ~= '' then
    score = ARGV[5]
  end
  redis.call('ZADD', KEYS[4], score, ARGV[1])
end
return 1
