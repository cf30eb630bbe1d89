-- promote.lua: move due jobs from a queue's scheduled set into its stream, all in one step.
-- KEYS[1] scheduled set, KEYS[2] stream (level 1: a job of a higher level goes into its
--   level's stream, cv_level_stream of its 'priority' field)
-- ARGV[1] limit, ARGV[2] job key prefix, ARGV[3] the events publish command ('SPUBLISH',
--   'PUBLISH' or ''), ARGV[4] the events channel
-- A job is due when Redis's own clock (TIME) reaches its score: every scheduler shares that
-- clock, so a worker whose clock runs ahead promotes nothing early. (Redis 7 replicates a
-- script's effects, not the script, so reading TIME before writing is allowed.)
-- A due job gets a new stream entry (status queued, new `entry`, its payload moves from the hash
-- into the entry) and leaves the set. An id whose job is gone or no longer scheduled (canceled
-- meanwhile) just leaves the set. Any number of schedulers may run this at once: each promotion
-- happens once because the whole move is one script. A debounced job's debounce key
-- (keys.Queue.Debounce) is deleted when it still names the job, in the same step, so that the
-- key's next publish starts a new window. The promoted jobs are announced (queued) on the events
-- channel in one message. A job of a fair group passes its group's gate (cv_group_enter): with
-- no place free it becomes 'queued' with no entry and waits in its group's list.
-- Returns {CV_OK, moved, next due time in unix ms or -1 when the set is empty, Redis's time in unix
-- us, lag in ms or -1 when nothing was due}. The time is in microseconds so that the caller's wait
-- (next due - Redis's time) does not round up by as much as a millisecond. The lag is how long
-- the most overdue job of the batch waited past its due time (one ZSCORE, only when some are due).
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, ARGV[1])
local lag = -1
if #ids > 0 then lag = now - tonumber(redis.call('ZSCORE', KEYS[1], ids[1])) end
local moved, ev = 0, {}
local gp = cv_group_prefix(ARGV[2])
for _, id in ipairs(ids) do
  local jobkey = ARGV[2] .. id
  local h = redis.call('HMGET', jobkey, 'status', 'type', 'payload', 'metadata', 'attempt',
    'max_retries', 'timeout_ms', 'debounce', 'group', 'priority', 'limit_key')
  if h[1] == 'scheduled' and h[9] and not cv_group_enter(gp, h[9], id) then
    if h[8] and redis.call('GET', h[8]) == id then redis.call('DEL', h[8]) end
    redis.call('HSET', jobkey, 'status', 'queued', 'enqueued_at', now)
    redis.call('HINCRBY', jobkey, 'version', 1)
    cv_group_wait(gp, h[9], id)
    moved = moved + 1
    ev[moved] = 'queued ' .. cv_num(h[5], 0) .. ' ' .. id
  elseif h[1] == 'scheduled' then
    -- A debounced job's window ends here: the key's next publish starts a new one.
    if h[8] and redis.call('GET', h[8]) == id then redis.call('DEL', h[8]) end
    local e = cv_xadd(cv_level_stream(KEYS[2], h[10]), id, h[3], h[4], h[2], cv_num(h[5], 0) + 1, h[6], h[7], h[11])
    redis.call('HSET', jobkey, 'status', 'queued', 'entry', e, 'enqueued_at', now)
    redis.call('HDEL', jobkey, 'payload', 'metadata')
    redis.call('HINCRBY', jobkey, 'version', 1)
    moved = moved + 1
    ev[moved] = 'queued ' .. cv_num(h[5], 0) .. ' ' .. id
  end
end
-- In chunks: unpack of a long list fails after the writes above were applied.
if #ids > 0 then cv_call_list('ZREM', KEYS[1], {}, ids) end
cv_announce(ARGV[3], ARGV[4], ev)
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first == 0 then return {CV_OK, moved, -1, now_us, lag} end
return {CV_OK, moved, tonumber(first[2]), now_us, lag}
