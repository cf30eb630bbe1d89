-- pause.lua: pause or resume a stored schedule, in one step with the check that it exists (a
-- pause racing a delete must not leave a pause behind for the next schedule of the name).
-- KEYS[1] the definitions hash, KEYS[2] the set of paused schedules, KEYS[3] the schedule's
-- state hash, KEYS[4] the due index (keys.SchedulesDue)
-- ARGV[1] the schedule's name, ARGV[2] "1" to pause, "0" to resume, ARGV[3] now (unix ms)
-- Returns 0 when the schedule is not stored, else 1. A resume drops the ticks of the pause: it
-- moves Last to now, forward only (a scheduler whose clock runs ahead may have gone further).
-- Either bumps the state's gen, so that a scheduler that read the schedule before does not
-- index it by that read.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if ARGV[2] == '1' then
  if redis.call('SADD', KEYS[2], ARGV[1]) == 1 then
    redis.call('ZREM', KEYS[4], ARGV[1])
    redis.call('HINCRBY', KEYS[3], 'gen', 1)
  end
  return 1
end
if redis.call('SREM', KEYS[2], ARGV[1]) == 1 then
  local cur = tonumber(redis.call('HGET', KEYS[3], 'last') or '0')
  if cur < tonumber(ARGV[3]) then
    redis.call('HSET', KEYS[3], 'last', ARGV[3])
  end
  redis.call('HINCRBY', KEYS[3], 'gen', 1)
  redis.call('ZADD', KEYS[4], 0, ARGV[1])
end
return 1
