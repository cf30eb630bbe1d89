-- purge.lua: delete up to ARGV[2] of the oldest dead jobs that died at least ARGV[3] ms ago, by
-- Redis's clock (TIME), so a caller whose clock is off purges nothing it should not.
-- KEYS[1] dead set
-- ARGV[1] job key prefix, ARGV[2] limit, ARGV[3] minimum age (ms), ARGV[4] (a dry run, which
-- deletes nothing) the offset into those jobs, oldest first
-- A job's logs key (keys.Queue.Logs) goes with its hash.
-- Returns {CV_OK, the number deleted}; callers loop until it is below the limit. A dry run
-- returns {CV_OK, the number found, their ids}: the same rule picks what a purge would delete.
local t = redis.call('TIME')
local cutoff = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(ARGV[3])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff, 'LIMIT', ARGV[4] or 0, ARGV[2])
if ARGV[4] then return {CV_OK, #ids, ids} end
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, id in ipairs(ids) do
  cv_wf_purged(ARGV[1] .. id, id, now) -- a workflow's task: counted purged (lua/workflows.lua)
  redis.call('DEL', ARGV[1] .. id, cv_logs_key(ARGV[1] .. id, id))
end
if #ids > 0 then cv_call_list('ZREM', KEYS[1], {}, ids) end
return {CV_OK, #ids}
