-- progress.lua: record a running job's progress (pipeline.Job.Progress) and announce it on the
-- queue's events channel. Not a transition: the status, the version and the sets do not change.
-- KEYS[1] job hash, KEYS[2] the queue's logged flag (keys.Queue.Logged)
-- ARGV[1] id, ARGV[2] entry (the handler's stream entry), ARGV[3] attempt (the handler's),
--   ARGV[4] percent (0-100), ARGV[5] message, ARGV[6] publish command ('SPUBLISH', 'PUBLISH' or
--   ''), ARGV[7] events channel, ARGV[8] the attempt's log lines so far ('' for none, or none
--   new since its last report: finish.lua's logs value)
-- Lines go to the job's logs key as the attempt's item, outcome 'running' (cv_logs_put),
-- replaced by the next report's and by the outcome's: what an attempt logged before its last
-- report outlives its worker's death.
-- Fenced like a worker's transition (cv_live): a handler whose job moved on (canceled,
-- recovered by another worker, put back on shutdown: each leaves the entry or the status)
-- writes nothing, so a stale handler never overwrites the progress of the run that is live
-- now. The entry is the fence (every run has its own); the hash's attempt is not, as it is
-- written only with the start mark, after the handler may have reported.
-- Writes the field 'progress' as "<attempt> <entry> <now ms> <percent> <message>" (now by
-- Redis's TIME: one clock for every worker). Returns {CV_OK, now}; {CV_REFUSED, status} when
-- fenced; {CV_NOT_FOUND} when the job is gone.
local h = redis.call('HMGET', KEYS[1], 'entry', 'status')
if not h[2] then return {CV_NOT_FOUND} end
if not cv_live(h, ARGV[2]) then return {CV_REFUSED, h[2]} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'progress',
  ARGV[3] .. ' ' .. ARGV[2] .. ' ' .. now .. ' ' .. ARGV[4] .. ' ' .. ARGV[5])
if ARGV[8] and ARGV[8] ~= '' then
  cv_logs_put(KEYS[1], ARGV[1], ARGV[3], 'running', now, ARGV[8])
  redis.call('SET', KEYS[2], '1')
end
cv_announce(ARGV[6], ARGV[7], {'progress ' .. ARGV[3] .. ' ' .. ARGV[1]})
return {CV_OK, now}
