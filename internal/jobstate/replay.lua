-- replay.lua: move a dead job back into the stream for a fresh set of attempts.
-- KEYS[1] stream (level 1: the job goes back into its level's stream, cv_level_stream of its
--   'priority' field), KEYS[2] dead set, KEYS[3] job hash
-- ARGV[1] now (unix ms), ARGV[2] id
-- A job published with a unique key takes its key again (for the TTL it was published with), so
-- that a publish with the same key finds the replayed job instead of making a second one; when
-- another job holds the key now, the replay is refused and nothing changes.
-- A job of a fair group passes its group's gate (cv_group_enter): with no place free it is
-- 'queued' with no entry, waiting in its group's list, and the reply's entry is ''.
-- Returns {CV_OK, new entry id}; {CV_WRONG_STATE, status} when the job is not in the dead set;
-- {CV_NO_TYPE} when its record cannot be run again (an unreadable entry kept as a dead record
-- has no type); {CV_NOT_FOUND} when there is no such job; {CV_UNIQUE_HELD, id} when job id
-- holds the unique key now.
if not redis.call('ZSCORE', KEYS[2], ARGV[2]) then
  local status = redis.call('HGET', KEYS[3], 'status')
  if not status then return {CV_NOT_FOUND} end
  return {CV_WRONG_STATE, status}
end
local h = redis.call('HMGET', KEYS[3], 'status', 'type', 'payload', 'metadata', 'max_retries',
  'timeout_ms', 'unique', 'unique_ttl_ms', 'group', 'priority', 'limit_key')
if h[1] ~= 'failed' or not h[2] or h[2] == '' then return {CV_NO_TYPE} end
if h[7] then
  local holder = redis.call('GET', h[7])
  if holder and holder ~= ARGV[2] then return {CV_UNIQUE_HELD, holder} end
  -- Records written before unique_ttl_ms existed hold the key for a day.
  redis.call('SET', h[7], ARGV[2], 'PX', h[8] or '86400000')
end
-- The last run's progress report goes: the attempts count from 1 again, and a report of the
-- old attempt 1 would pass for the new one's.
redis.call('HDEL', KEYS[3], 'progress')
-- The history keeps the old attempts; a mark (attempt 0: no attempt) says where the new set
-- starts, so that its attempt 1 does not read as the old attempt 1 again.
cv_attempt(KEYS[3], 0, '', ARGV[1], ARGV[1], 'replayed', '')
if h[9] and cv_group_replay_held(KEYS[3], ARGV[2], h[9], ARGV[1], KEYS[2]) then return {CV_OK, ''} end
local e = cv_xadd(cv_level_stream(KEYS[1], h[10]), ARGV[2], h[3], h[4], h[2], 1, h[5], h[6], h[11])
redis.call('HSET', KEYS[3], 'status', 'queued', 'entry', e, 'enqueued_at', ARGV[1], 'attempt', 0,
  'run_at', ARGV[1])
redis.call('HDEL', KEYS[3], 'payload', 'metadata', 'completed_at', 'result')
redis.call('HINCRBY', KEYS[3], 'version', 1)
redis.call('ZREM', KEYS[2], ARGV[2])
-- A task of a workflow resumes it: the tasks its death canceled wait again (cv_wf_resume).
cv_wf_resume(KEYS[3], ARGV[2], ARGV[1])
return {CV_OK, e}
