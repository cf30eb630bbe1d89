-- foreign.lua: adopt a stream entry written by another Watermill publisher (the stock
-- watermill-redisstream Publisher: `_watermill_message_uuid`, `payload`, `metadata`, and no
-- `conveyor` field, no job record) as a job, on its first delivery, before its handler runs.
-- KEYS[1] stats hash, KEYS[2] job hash, KEYS[3] stream, KEYS[4] scheduled set, KEYS[5] the
--   unique key, when the message names one
-- ARGV[1] entry id, ARGV[2] type, ARGV[3] max_retries, ARGV[4] timeout_ms, ARGV[5] created_at
--   (the entry's time, unix ms), ARGV[6] now (unix ms), ARGV[7] worker, ARGV[8] job id,
--   ARGV[9] group, ARGV[10] run_at (unix ms), ARGV[11] wake channel, ARGV[12] unique_ttl_ms
--   (with KEYS[5])
-- The job follows the rules of a publish (enqueue.lua): a unique key held by another job
-- refuses the message, whose entry is then acknowledged and deleted with nothing written; a
-- run_at after now schedules the job, its payload and metadata moved from the entry into its
-- hash, and the entry acknowledged and deleted. Otherwise the job is created in_progress on
-- this entry, attempt 1; its payload and metadata stay in the entry. From then on it is fenced
-- and recovered like any job (recovery puts it back in Conveyor's layout, with the type and
-- settings of its hash).
-- Returns {CV_OK} adopted to run now; {CV_OK, 'scheduled'} adopted and scheduled;
-- {CV_EXISTS} adopted already on this entry (delivered again); {CV_REFUSED} the id names a
-- job that lives on another entry (nothing written); {CV_UNIQUE_HELD, holder}.
local h = redis.call('HMGET', KEYS[2], 'entry', 'status')
if h[2] then
  if cv_live(h, ARGV[1]) then return {CV_EXISTS} end
  return {CV_REFUSED}
end
local id = ARGV[8]
local f = {'type', ARGV[2], 'max_retries', ARGV[3], 'timeout_ms', ARGV[4],
  'created_at', ARGV[5], 'version', '1'}
if KEYS[5] then
  if not redis.call('SET', KEYS[5], id, 'NX', 'PX', ARGV[12]) then
    cv_drop(KEYS[3], ARGV[9], {ARGV[1]})
    return {CV_UNIQUE_HELD, redis.call('GET', KEYS[5])}
  end
  f[#f + 1] = 'unique'; f[#f + 1] = KEYS[5]
  f[#f + 1] = 'unique_ttl_ms'; f[#f + 1] = ARGV[12] -- for a replay to take the key again
end
redis.call('HINCRBY', KEYS[1], 'enqueued', 1)
if tonumber(ARGV[10]) > tonumber(ARGV[6]) then
  local e = cv_entry(KEYS[3], ARGV[1]) or {}
  f[#f + 1] = 'status'; f[#f + 1] = 'scheduled'
  f[#f + 1] = 'run_at'; f[#f + 1] = ARGV[10]
  f[#f + 1] = 'payload'; f[#f + 1] = e['payload'] or ''
  f[#f + 1] = 'metadata'; f[#f + 1] = e['metadata'] or ''
  redis.call('HSET', KEYS[2], unpack(f))
  redis.call('ZADD', KEYS[4], ARGV[10], id)
  cv_wake_if_first(KEYS[4], ARGV[11], id, ARGV[10])
  cv_drop(KEYS[3], ARGV[9], {ARGV[1]})
  return {CV_OK, 'scheduled'}
end
redis.call('HSET', KEYS[2], 'status', 'in_progress', 'attempt', '1', 'enqueued_at', ARGV[5],
  'started_at', ARGV[6], 'worker', ARGV[7], 'entry', ARGV[1], unpack(f))
return {CV_OK}
