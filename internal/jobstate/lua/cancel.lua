-- cancel.lua (shared): the steps of a cancel, which cancel.lua runs for a caller and
-- enqueue.lua runs for the job a full queue drops (full_policy drop-oldest). Both so write
-- the same record, counters, index and event.

-- Cancels the job whose hash is c.job (id c.id) of the queue whose level-1 stream is
-- c.stream. c: stream, sched (the scheduled set), stats, job, id, group (the consumer group),
-- now (unix ms, a string), retention (default ms, a string; 0 keeps a tombstone), minret (ms),
-- pubcmd and channel (the events), index and count (the canceled index and its count), cap
-- (the index's bound), delete (true: the operator's delete), reason (nil, or the text kept as
-- the job's last error). Returns what cancel.lua returns.
local function cv_cancel(c)
  local h = redis.call('HMGET', c.job, 'status', 'entry', 'retention_ms', 'attempt', 'debounce',
    'priority', 'limit_wait')
  local status = h[1]
  if not status then return {CV_NOT_FOUND} end
  if status == 'completed' or status == 'failed' or status == 'canceled' then return {CV_WRONG_STATE, status} end
  if c.delete and status ~= 'scheduled' and status ~= 'queued' then return {CV_WRONG_STATE, status} end
  local jprefix = string.sub(c.job, 1, #c.job - #c.id)
  -- The job ends: off its limit key's count (lua/keywait.lua), in a queue that keeps one.
  local kw = cv_keyed(jprefix)
  if kw then cv_key_out(kw, c.job) end
  if status == 'scheduled' then
    redis.call('ZREM', c.sched, c.id)
    -- A job waiting for a concurrency slot leaves its wait list now, not when its turn comes:
    -- the scheduled gauge counts the lists' lengths (LimitWaiting).
    if h[7] then cv_limit_unwait(jprefix, h[7], c.id) end
  elseif status == 'waiting' then
    redis.call('ZREM', cv_wf_waiting(jprefix), c.id)
  elseif h[2] and h[2] ~= '' then
    local stream = cv_level_stream(c.stream, h[6])
    cv_keep_payload(c.job, cv_entry(stream, h[2]))
    cv_drop(stream, c.group, {h[2]})
  end
  -- A running job gives back its concurrency slots (waking their waiters).
  cv_release_slots(c.job, c.id, c.stream, jprefix, c.now)
  cv_group_cancel(c.job, c.id, c.stream, jprefix, c.now, status, h[2])
  -- A task of a workflow cancels the tasks that wait for it (and theirs), or counts for a
  -- Finally task (cv_wf_end); their events go out with this one's.
  local wfev = {}
  cv_wf_end(c.job, c.id, 'X', nil, nil, c.now, c.stream, c.stats, wfev)
  redis.call('HSET', c.job, 'status', 'canceled', 'completed_at', c.now)
  if c.reason then redis.call('HSET', c.job, 'last_error', c.reason) end
  redis.call('HDEL', c.job, 'entry')
  redis.call('HINCRBY', c.job, 'version', 1)
  cv_release_unique(c.job, c.id)
  -- A canceled debounced job ends its window: the key's next publish starts a new one.
  if h[5] and redis.call('GET', h[5]) == c.id then redis.call('DEL', h[5]) end
  local ret = cv_num(h[3], tonumber(c.retention))
  if c.delete then
    redis.call('DEL', c.job)
  elseif ret <= 0 then
    redis.call('DEL', c.job)
    redis.call('HSET', c.job, 'status', 'canceled', 'completed_at', c.now)
    if c.reason then redis.call('HSET', c.job, 'last_error', c.reason) end
  elseif tonumber(c.cap) > 0 then
    cv_index(c.index, c.count, {c.now, c.id}, tonumber(c.now) - math.max(tonumber(c.retention), tonumber(c.minret)),
      tonumber(c.cap))
  end
  if not c.delete then redis.call('PEXPIRE', c.job, math.max(ret, tonumber(c.minret))) end
  -- The job's logs (a retried job's attempts may have logged) go or expire with its hash.
  if c.delete or ret <= 0 then
    redis.call('DEL', cv_logs_key(c.job, c.id))
  else
    redis.call('PEXPIRE', cv_logs_key(c.job, c.id), math.max(ret, tonumber(c.minret)))
  end
  redis.call('HINCRBY', c.stats, 'canceled', 1)
  wfev[#wfev + 1] = 'canceled ' .. (h[4] or '0') .. ' ' .. c.id
  cv_announce(c.pubcmd, c.channel, wfev)
  return {CV_OK, tostring(wfev.cv_wf_left or 0)}
end
