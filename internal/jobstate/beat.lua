-- beat.lua: a worker's heartbeat (engine.Heartbeat) in one call: its record, its entry in the
-- workers' index, and, by Redis's clock, that a live worker reads each of its queues and handles
-- each of its types (the sightings a publish is checked against: seen.lua).
-- KEYS[1] the record (keys.WorkerBeat), KEYS[2] the workers' index (keys.Workers),
--   KEYS[3] the queues seen (keys.SeenQueues), KEYS[4] the types seen (keys.SeenTypes): one
--   hash tag, so one node of a cluster.
-- ARGV[1] the worker's name, ARGV[2] the record, ARGV[3] its TTL (ms),
--   ARGV[4] its index score (the writer's unix ms at which the record expires),
--   ARGV[5] the index members scored at or below it are pruned (the writer's unix ms),
--   ARGV[6] how long a sighting is kept (ms), ARGV[7] the number of queues that follow,
--   then the queues, then the types.
-- Returns {CV_OK}.
-- The index keeps the writer's clock (Workers reads it so); the sightings take Redis's, so that
-- the hosts' clocks cannot make a queue look read or unread. TIME before the writes is allowed:
-- Redis replicates a script's effects, not the script.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stamp = string.format('%d', now)
local oldest = string.format('(%d', now - tonumber(ARGV[6]))
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[5])
local nq = tonumber(ARGV[7])
local function seen(key, from, to)
  if from > to then return end
  local a = {}
  for i = from, to do
    a[#a + 1] = stamp
    a[#a + 1] = ARGV[i]
  end
  cv_call_list('ZADD', key, {}, a)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', oldest)
end
seen(KEYS[3], 8, 7 + nq)
seen(KEYS[4], 8 + nq, #ARGV)
return {CV_OK}
