-- enqueue1.lua: create one job to run at once, with no unique key, timeout or retention of its
-- own: the most common publish, kept as cheap as a script can be (enqueue.lua does the rest).
-- KEYS[1] stream, KEYS[2] stats hash, KEYS[3] job hash, KEYS[4] the closed flag (keys.Closed)
-- ARGV[1] id, ARGV[2] type, ARGV[3] payload, ARGV[4] metadata, ARGV[5] max_retries,
--   ARGV[6] now (unix ms); for a bounded queue (policy reject) only, ARGV[7] the bound on its
--   waiting jobs (max_waiting, per partition), ARGV[8] the consumer group and KEYS[5] the
--   scheduled set: at the bound the job is refused, {CV_FULL, the count of waiting jobs},
--   and counted (rejected_full). Unbounded, the script reads nothing more.
-- Returns the new entry id; {CV_WRONG_STATE} when the flag is set (the queue's
-- partition count changed: nothing written); when the id exists already (nothing written),
-- {CV_EXISTS}, or
-- {CV_CONFLICT, what differs} when that job has another type or payload. A created job's
-- reply is a bare string, not {code, ...}: an array costs a single publish 5% more
-- (docs/BENCHMARKS.md). The script is kept beside enqueue.lua because it costs Redis half as
-- much per single publish (the same page).
-- One EXISTS answers for the job and the closed flag together: the usual answer, 0, costs
-- the publish nothing more than the job's lookup did.
local found = redis.call('EXISTS', KEYS[3], KEYS[4])
if found > 0 then
  if found > 1 or redis.call('EXISTS', KEYS[4]) == 1 then return {CV_WRONG_STATE} end
  local d = cv_differs(KEYS[3], KEYS[1], ARGV[2], ARGV[3])
  if d then return {CV_CONFLICT, d} end
  return {CV_EXISTS}
end
if ARGV[7] then
  local bound = tonumber(ARGV[7])
  local waiting = cv_count_waiting(KEYS[1], KEYS[5], KEYS[2], string.sub(KEYS[3], 1, #KEYS[3] - #ARGV[1]), ARGV[8], bound, 1)
  if waiting >= bound then
    redis.call('HINCRBY', KEYS[2], 'rejected_full', 1)
    return {CV_FULL, tostring(waiting)}
  end
end
local e = cv_xadd(KEYS[1], ARGV[1], ARGV[3], ARGV[4], ARGV[2], '1', ARGV[5], '0')
redis.call('HSET', KEYS[3], 'type', ARGV[2], 'status', 'queued', 'max_retries', ARGV[5],
  'created_at', ARGV[6], 'entry', e, 'version', '1') -- '1', not 1: see enqueue.lua
redis.call('HINCRBY', KEYS[2], 'enqueued', 1)
return e
