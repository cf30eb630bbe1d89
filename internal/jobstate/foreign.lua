-- foreign.lua: adopt a stream entry written by another Watermill publisher (the stock
-- watermill-redisstream Publisher: `_watermill_message_uuid`, `payload`, `metadata`, and no
-- `conveyor` field, no job record) as a job, on its first delivery, before its handler runs.
-- KEYS[1] stats hash, KEYS[2] job hash
-- ARGV[1] entry id, ARGV[2] type, ARGV[3] max_retries, ARGV[4] timeout_ms, ARGV[5] created_at
--   (the entry's time, unix ms), ARGV[6] now (unix ms), ARGV[7] worker
-- The job is created in_progress on this entry, attempt 1; its payload and metadata stay in the
-- entry. From then on it is fenced and recovered like any job (recovery puts it back in
-- Conveyor's layout, with the type and settings of its hash).
-- Returns {CV_OK} adopted; {CV_EXISTS} adopted already on this entry (delivered again);
-- {CV_REFUSED} the id names a job that lives on another entry (nothing written).
local h = redis.call('HMGET', KEYS[2], 'entry', 'status')
if h[2] then
  if cv_live(h, ARGV[1]) then return {CV_EXISTS} end
  return {CV_REFUSED}
end
redis.call('HSET', KEYS[2], 'type', ARGV[2], 'status', 'in_progress', 'attempt', '1',
  'max_retries', ARGV[3], 'timeout_ms', ARGV[4], 'created_at', ARGV[5], 'enqueued_at', ARGV[5],
  'started_at', ARGV[6], 'worker', ARGV[7], 'entry', ARGV[1], 'version', '1')
redis.call('HINCRBY', KEYS[1], 'enqueued', 1)
return {CV_OK}
