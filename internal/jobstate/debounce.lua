-- debounce.lua: publish one job with a debounce key (pipeline.WithDebounce), in one step: join
-- the key's pending job, or start a new window with a new scheduled job.
-- KEYS[1] scheduled set, KEYS[2] stats hash, KEYS[3] the new job's hash, KEYS[4] the debounce key
--   (keys.Queue.Debounce: the id of the window's pending job), KEYS[5] the closed flag, KEYS[6]
--   the queue's set of priority levels (keys.Queue.Levels)
-- ARGV[1] new id, ARGV[2] type, ARGV[3] payload, ARGV[4] metadata, ARGV[5] max_retries,
--   ARGV[6] timeout_ms, ARGV[7] retention_ms ('' = the queue default), ARGV[8] quiet ms,
--   ARGV[9] max wait ms, ARGV[10] job key prefix, ARGV[11] wake channel, ARGV[12] limit key
--   ('' = none: a join drops the earlier publish's, as the last publish wins), ARGV[13] priority
--   ('' = level 1, else '2'..'4': kept in the hash, for promote.lua to queue the job in its
--   level's stream, and added to the queue's set of levels; a join takes the last publish's)
-- Times are Redis's (TIME), rounded up to the millisecond, so that no caller's clock makes a job
-- due early. A window's job is due min(last publish + quiet, first publish + max wait), each
-- publish's own quiet and max wait applying.
-- The key's job is joined while it is `scheduled` and never started (no attempt): its type,
-- payload, metadata, max retries, timeout and retention become this publish's, its due time
-- moves, and the key stays. Once it was promoted (promote.lua deletes the key), canceled
-- (cancel.lua deletes it), or is anything but a never-started scheduled job, a new window
-- starts. Promotion and this script are atomic steps over the same slot, so a publish racing
-- a promotion either joins the window before it (and runs with it) or starts the next.
-- Returns {CV_WRONG_STATE} when the closed flag is set (nothing written), else {CV_OK, id,
-- due (unix ms), joined (1: joined the pending job, 0: created id), created_at, version,
-- publishes, until (first publish + max wait, unix ms)}.
if redis.call('EXISTS', KEYS[5]) == 1 then return {CV_WRONG_STATE} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.ceil(tonumber(t[2]) / 1000)
local quiet, maxwait = tonumber(ARGV[8]), tonumber(ARGV[9])
local tmo, retention = ARGV[6], ARGV[7]
local cur = redis.call('GET', KEYS[4])
local function add_level() redis.call('SADD', KEYS[6], ARGV[13]) end
if cur then
  local jobkey = ARGV[10] .. cur
  local h = redis.call('HMGET', jobkey, 'status', 'attempt', 'debounce', 'debounce_first',
    'debounce_pubs', 'created_at')
  if h[1] == 'scheduled' and (not h[2] or h[2] == '0') and h[3] == KEYS[4] then
    local first = tonumber(h[4])
    local due = math.min(now + quiet, first + maxwait)
    local pubs = cv_num(h[5], 1) + 1
    local f = {'type', ARGV[2], 'payload', ARGV[3], 'metadata', ARGV[4], 'max_retries', ARGV[5],
      'run_at', due, 'debounce_until', first + maxwait, 'debounce_pubs', pubs}
    if tmo ~= '0' then f[#f + 1] = 'timeout_ms'; f[#f + 1] = tmo
    else redis.call('HDEL', jobkey, 'timeout_ms') end
    if retention ~= '' then f[#f + 1] = 'retention_ms'; f[#f + 1] = retention
    else redis.call('HDEL', jobkey, 'retention_ms') end
    if ARGV[12] ~= '' then f[#f + 1] = 'limit_key'; f[#f + 1] = ARGV[12]
    else redis.call('HDEL', jobkey, 'limit_key') end
    if ARGV[13] ~= '' then f[#f + 1] = 'priority'; f[#f + 1] = ARGV[13]; add_level()
    else redis.call('HDEL', jobkey, 'priority') end
    redis.call('HSET', jobkey, unpack(f))
    local v = redis.call('HINCRBY', jobkey, 'version', 1)
    redis.call('ZADD', KEYS[1], due, cur)
    cv_wake_if_first(KEYS[1], ARGV[11], cur, due)
    redis.call('HINCRBY', KEYS[2], 'debounced', 1)
    return {CV_OK, cur, due, 1, tonumber(h[6]), v, pubs, first + maxwait}
  end
end
local id = ARGV[1]
local due = now + math.min(quiet, maxwait)
local f = {'type', ARGV[2], 'status', 'scheduled', 'max_retries', ARGV[5], 'created_at', now,
  'version', '1', 'run_at', due, 'payload', ARGV[3], 'metadata', ARGV[4],
  'debounce', KEYS[4], 'debounce_first', now, 'debounce_until', now + maxwait, 'debounce_pubs', '1'}
if tmo ~= '0' then f[#f + 1] = 'timeout_ms'; f[#f + 1] = tmo end
if retention ~= '' then f[#f + 1] = 'retention_ms'; f[#f + 1] = retention end
if ARGV[12] ~= '' then f[#f + 1] = 'limit_key'; f[#f + 1] = ARGV[12] end
if ARGV[13] ~= '' then f[#f + 1] = 'priority'; f[#f + 1] = ARGV[13]; add_level() end
redis.call('HSET', KEYS[3], unpack(f))
redis.call('SET', KEYS[4], id)
redis.call('ZADD', KEYS[1], due, id)
cv_wake_if_first(KEYS[1], ARGV[11], id, due)
redis.call('HINCRBY', KEYS[2], 'enqueued', 1)
return {CV_OK, id, due, 0, now, 1, 1, now + maxwait}
