-- Changes a queue's settings record and announces the change, in one step: a worker that hears
-- the notice reads the record as changed.
-- KEYS[1] the record (a hash). ARGV[1] the notice channel; ARGV[2] the queue; ARGV[3] the
-- pause's token, or ''; ARGV[4] '1' when the legacy set keys.Paused holds the queue (a new
-- record starts paused then); ARGV[5] the pause field set to '1' or '0', or '' to leave it;
-- ARGV[6] and ARGV[7] the names of the pause and revision fields; ARGV[8] how many
-- field/value pairs follow to set; the rest are fields to delete.
-- Returns {rev, 1 when it was paused before, 1 when the record is new}.
local paused, rev_field = ARGV[6], ARGV[7]
local fresh = redis.call('EXISTS', KEYS[1]) == 0
if fresh and ARGV[4] == '1' then redis.call('HSET', KEYS[1], paused, '1') end
local was = redis.call('HGET', KEYS[1], paused) == '1'
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], paused, ARGV[5]) end
local i = 9
for _ = 1, tonumber(ARGV[8]) do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  i = i + 2
end
while i <= #ARGV do
  redis.call('HDEL', KEYS[1], ARGV[i])
  i = i + 1
end
local rev = redis.call('HINCRBY', KEYS[1], rev_field, 1)
redis.call('PUBLISH', ARGV[1], rev .. ' ' .. ARGV[3] .. ' ' .. ARGV[2])
return {rev, was and 1 or 0, fresh and 1 or 0}
