-- prune.lua: delete the group's consumers that hold no pending entries and have been idle for
-- at least ARGV[2] ms (workers that stopped; each worker process has a consumer name of its
-- own, so without this the group would grow with every restart).
-- KEYS[1] stream, KEYS[2] the queue's recovery lock
-- ARGV[1] group, ARGV[2] min idle ms, ARGV[3] lock token ('' skips the fence)
-- XGROUP DELCONSUMER drops a consumer's pending entries, so the check and the delete must be one
-- atomic step: a consumer is deleted only while it holds nothing.
-- Returns {CV_OK, the number of consumers deleted}, or {CV_LOCK_LOST} when the lock is not held.
if ARGV[3] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[3] then return {CV_LOCK_LOST} end
local min_idle = tonumber(ARGV[2])
local deleted = 0
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local t = {}
  for i = 1, #c, 2 do t[c[i]] = c[i + 1] end
  if tonumber(t['pending']) == 0 and tonumber(t['idle']) >= min_idle then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], t['name'])
    deleted = deleted + 1
  end
end
return {CV_OK, deleted}
