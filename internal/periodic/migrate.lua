-- migrate.lua: index schedules stored before the indexes were (or by a version without them),
-- and drop names whose definition is gone. Idempotent: a name indexed already keeps its score.
-- KEYS[1] the definitions hash, KEYS[2] the set of paused schedules, KEYS[3] the due index,
-- KEYS[4] the names
-- ARGV: names to look at (a chunk, so that no call holds Redis long)
-- Returns how many names it added or removed.
local n = 0
for _, name in ipairs(ARGV) do
  if redis.call('HEXISTS', KEYS[1], name) == 1 then
    n = n + redis.call('ZADD', KEYS[4], 'NX', 0, name)
    if redis.call('SISMEMBER', KEYS[2], name) == 0 then
      n = n + redis.call('ZADD', KEYS[3], 'NX', 0, name)
    end
  else
    n = n + redis.call('ZREM', KEYS[4], name)
  end
end
return n
