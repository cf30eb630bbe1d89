-- cancel.lua: cancel a job that has not finished.
-- KEYS[1] stream (level 1: a job's entry is in its level's stream, cv_level_stream of its
--   'priority' field), KEYS[2] scheduled set, KEYS[3] stats hash, KEYS[4] job hash
-- ARGV[1] group, ARGV[2] now (unix ms), ARGV[3] default retention ms (0 keeps only a
--   tombstone), ARGV[4] id, ARGV[5] the shortest retention ms (see finish.lua: a publish sent
--   again after a lost reply must find the job), ARGV[6] the events publish command ('SPUBLISH',
--   'PUBLISH' or ''), ARGV[7] the events channel, ARGV[8] the most entries the index of
--   canceled jobs keeps (keys.FinishedIndexCap; 0 indexes nothing), ARGV[9] '1' to delete the
--   job instead (the operator's delete, pipeline.Inspector.Delete): only a scheduled or queued
--   job, whose record then goes at once with no tombstone and no index entry (counted and
--   announced as a cancel all the same, so a waiter wakes and the counters still add up)
-- KEYS[5] the index of canceled jobs (keys.Queue.Canceled), KEYS[6] its count (keys.IndexCount):
--   the job is added, scored by now,
--   unless kept only as a tombstone, and the index trimmed as finish.lua's (cv_index)
-- A queued or running job's entry is acknowledged and deleted, and its late result is refused
-- by fencing. The change is announced on the events channel (canceled), for every job and not
-- only for watched ones (finish.lua's rule): the worker running the job listens on the channel
-- and cancels its handler's context when it hears it (pipeline/cancel.go); a worker that missed
-- the message finds the lease gone at its next renewal, which does the same. A job of a fair
-- group waiting for a place leaves its group's list; one in the window gives its place back and
-- moves the group's next waiting job into the stream (cv_group_cancel).
-- A task of a workflow that waits for its dependencies ('waiting': no entry, in the queue's
-- index of waiting tasks, keys.Queue.WorkflowWaiting) leaves the index and is canceled like a
-- queued one. A job waiting for a concurrency slot leaves its wait list.
-- A workflow's cascade past the edges one call follows (lua/workflows.lua's cv_wf_budget) is left on the
-- queue's work list (keys.Queue.WorkflowCascade), for the caller to go on with
-- (jobstate.FollowCascade).
-- Returns {CV_OK, the items on that work list (a string; '0': no cascade left)} canceled,
-- {CV_WRONG_STATE, status} already finished, or running when deleting
-- (nothing changed),
-- {CV_NOT_FOUND} no such job.
local h = redis.call('HMGET', KEYS[4], 'status', 'entry', 'retention_ms', 'attempt', 'debounce',
  'priority', 'limit_wait')
local status = h[1]
if not status then return {CV_NOT_FOUND} end
if status == 'completed' or status == 'failed' or status == 'canceled' then return {CV_WRONG_STATE, status} end
local delete = ARGV[9] == '1'
if delete and status ~= 'scheduled' and status ~= 'queued' then return {CV_WRONG_STATE, status} end
local jprefix = string.sub(KEYS[4], 1, #KEYS[4] - #ARGV[4])
if status == 'scheduled' then
  redis.call('ZREM', KEYS[2], ARGV[4])
  -- A job waiting for a concurrency slot leaves its wait list now, not when its turn comes:
  -- the scheduled gauge counts the lists' lengths (LimitWaiting).
  if h[7] then cv_limit_unwait(jprefix, h[7], ARGV[4]) end
elseif status == 'waiting' then
  redis.call('ZREM', cv_wf_waiting(jprefix), ARGV[4])
elseif h[2] and h[2] ~= '' then
  local stream = cv_level_stream(KEYS[1], h[6])
  cv_keep_payload(KEYS[4], cv_entry(stream, h[2]))
  cv_drop(stream, ARGV[1], {h[2]})
end
-- A running job gives back its concurrency slots (waking their waiters).
cv_release_slots(KEYS[4], ARGV[4], KEYS[1], jprefix, ARGV[2])
cv_group_cancel(KEYS[4], ARGV[4], KEYS[1], jprefix, ARGV[2], status, h[2])
-- A task of a workflow cancels the tasks that wait for it (and theirs), or counts for a
-- Finally task (cv_wf_end); their events go out with this one's.
local wfev = {}
cv_wf_end(KEYS[4], ARGV[4], 'X', nil, nil, ARGV[2], KEYS[1], KEYS[3], wfev)
redis.call('HSET', KEYS[4], 'status', 'canceled', 'completed_at', ARGV[2])
redis.call('HDEL', KEYS[4], 'entry')
redis.call('HINCRBY', KEYS[4], 'version', 1)
cv_release_unique(KEYS[4], ARGV[4])
-- A canceled debounced job ends its window: the key's next publish starts a new one.
if h[5] and redis.call('GET', h[5]) == ARGV[4] then redis.call('DEL', h[5]) end
local ret = cv_num(h[3], tonumber(ARGV[3]))
if delete then
  redis.call('DEL', KEYS[4])
elseif ret <= 0 then
  redis.call('DEL', KEYS[4])
  redis.call('HSET', KEYS[4], 'status', 'canceled', 'completed_at', ARGV[2])
elseif tonumber(ARGV[8]) > 0 then
  cv_index(KEYS[5], KEYS[6], {ARGV[2], ARGV[4]}, tonumber(ARGV[2]) - math.max(tonumber(ARGV[3]), tonumber(ARGV[5])),
    tonumber(ARGV[8]))
end
if not delete then redis.call('PEXPIRE', KEYS[4], math.max(ret, tonumber(ARGV[5]))) end
-- The job's logs (a retried job's attempts may have logged) go or expire with its hash.
if delete or ret <= 0 then
  redis.call('DEL', cv_logs_key(KEYS[4], ARGV[4]))
else
  redis.call('PEXPIRE', cv_logs_key(KEYS[4], ARGV[4]), math.max(ret, tonumber(ARGV[5])))
end
redis.call('HINCRBY', KEYS[3], 'canceled', 1)
wfev[#wfev + 1] = 'canceled ' .. (h[4] or '0') .. ' ' .. ARGV[4]
cv_announce(ARGV[6], ARGV[7], wfev)
return {CV_OK, tostring(wfev.cv_wf_left or 0)}
