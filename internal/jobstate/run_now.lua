-- run_now.lua: move one scheduled job into its stream now, as promote.lua moves a due one
-- (the operator's "run now": a delayed job, a retry or a snoozed job that should not wait).
-- KEYS[1] scheduled set, KEYS[2] stream (level 1: a job of a higher level goes into its
--   level's stream, cv_level_stream of its 'priority' field), KEYS[3] job hash
-- ARGV[1] id, ARGV[2] job key prefix, ARGV[3] the events publish command ('SPUBLISH',
--   'PUBLISH' or ''), ARGV[4] the events channel
-- The move is promote.lua's for one job, in one step, so a scheduler promoting the same job
-- at the same moment moves it once: whichever runs first takes it out of the scheduled set,
-- and the other finds it gone (ZREM answers 0) or no longer scheduled. The job keeps its
-- attempt count, so a retry moved now is still the attempt it was going to be. A job of a fair
-- group passes its group's gate (cv_group_enter) and may wait in its group's list. A scheduled
-- job that is not in the scheduled set waits for a concurrency slot of a limit (its
-- 'limit_wait'): it runs when a slot frees, not sooner, and is refused here.
-- Returns {CV_OK} moved, {CV_WRONG_STATE, status} not scheduled or waiting for a limit slot
-- (status 'limited'), {CV_NOT_FOUND} no such job.
local jobkey = KEYS[3]
local id = ARGV[1]
local h = redis.call('HMGET', jobkey, 'status', 'type', 'payload', 'metadata', 'attempt',
  'max_retries', 'timeout_ms', 'debounce', 'group', 'priority', 'limit_key')
if not h[1] then return {CV_NOT_FOUND} end
if h[1] ~= 'scheduled' then return {CV_WRONG_STATE, h[1]} end
if redis.call('ZREM', KEYS[1], id) == 0 then return {CV_WRONG_STATE, 'limited'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- A debounced job's window ends here: the key's next publish starts a new one.
if h[8] and redis.call('GET', h[8]) == id then redis.call('DEL', h[8]) end
if h[9] and not cv_group_enter(cv_group_prefix(ARGV[2]), h[9], id) then
  redis.call('HSET', jobkey, 'status', 'queued', 'enqueued_at', now)
  redis.call('HINCRBY', jobkey, 'version', 1)
  cv_group_wait(cv_group_prefix(ARGV[2]), h[9], id)
else
  local e = cv_xadd(cv_level_stream(KEYS[2], h[10]), id, h[3], h[4], h[2], cv_num(h[5], 0) + 1, h[6], h[7], h[11])
  redis.call('HSET', jobkey, 'status', 'queued', 'entry', e, 'enqueued_at', now)
  redis.call('HDEL', jobkey, 'payload', 'metadata')
  redis.call('HINCRBY', jobkey, 'version', 1)
end
cv_announce(ARGV[3], ARGV[4], {'queued ' .. cv_num(h[5], 0) .. ' ' .. id})
return {CV_OK}
