-- seen.lua: the sightings the workers' beats write (beat.lua) since a window ago, with Redis's
-- clock, read on the node that holds them.
-- KEYS[1] the queues seen (keys.SeenQueues), KEYS[2] the types seen (keys.SeenTypes)
-- ARGV[1] the window (ms)
-- Returns {CV_OK, seconds, microseconds, {queue, ms, ...}, {type, ms, ...}}.
local t = redis.call('TIME')
local since = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(ARGV[1]))
return {CV_OK, t[1], t[2],
  redis.call('ZRANGEBYSCORE', KEYS[1], since, '+inf', 'WITHSCORES'),
  redis.call('ZRANGEBYSCORE', KEYS[2], since, '+inf', 'WITHSCORES')}
