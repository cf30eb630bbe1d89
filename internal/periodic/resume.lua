-- resume.lua: resume a paused schedule from now on, dropping the ticks of the pause.
-- KEYS[1] the set of paused schedules, KEYS[2] the schedule's state hash
-- ARGV[1] the schedule's name, ARGV[2] now (unix ms)
-- Last only moves forward: a scheduler may have handled ticks after now (clocks differ).
if redis.call('SREM', KEYS[1], ARGV[1]) == 1 then
  local cur = tonumber(redis.call('HGET', KEYS[2], 'last') or '0')
  if cur < tonumber(ARGV[2]) then
    redis.call('HSET', KEYS[2], 'last', ARGV[2])
  end
end
return 1
