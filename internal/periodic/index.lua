-- index.lua: score a schedule in the due index by what a scheduler read of it, unless it
-- changed since.
-- KEYS[1] the definitions hash, KEYS[2] the set of paused schedules, KEYS[3] the schedule's
-- state hash, KEYS[4] the due index (keys.SchedulesDue)
-- ARGV[1] the name, ARGV[2] the gen read, ARGV[3] the Last read, ARGV[4] the score (unix ms;
-- "" to take the schedule out: it has no next tick, or cannot run)
-- A schedule deleted or paused leaves the index whatever was read. Returns nothing.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 or redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  redis.call('ZREM', KEYS[4], ARGV[1])
  return
end
if (redis.call('HGET', KEYS[3], 'gen') or '') ~= ARGV[2] or (redis.call('HGET', KEYS[3], 'last') or '') ~= ARGV[3] then
  return
end
if ARGV[4] == '' then
  redis.call('ZREM', KEYS[4], ARGV[1])
else
  redis.call('ZADD', KEYS[4], ARGV[4], ARGV[1])
end
