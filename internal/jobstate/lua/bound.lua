-- bound.lua: a bounded queue's count of its waiting jobs (max_waiting; docs/OPERATIONS.md,
-- "Bounded queues"), which enqueue.lua and enqueue1.lua check a publish against.

-- The consumer group's pending count and last delivered entry id on stream s ('0-0' and 0 when
-- no worker made the group yet: every entry is undelivered).
local function cv_stream_group(s, group)
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', s)) do
    local f = {}
    for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
    if f['name'] == group then return {pending = f['pending'], last = f['last-delivered-id']} end
  end
  return {pending = 0, last = '0-0'}
end

-- How many of the queue's jobs wait: what the gauges Queued and Scheduled count (ReadStats).
-- Per priority level in use, the stream's length less the entries handed out (the group's pending);
-- the scheduled set; the jobs waiting for a concurrency slot; those in fair groups' lines.
-- The exact count is wanted only near the bound, and its dear part is XINFO GROUPS on each
-- stream (a reply of a dozen fields to parse here). So the streams' lengths are summed first,
-- the handed-out entries included: that overcounts, never undercounts. When that upper bound
-- plus the room the call asks for (its jobs, each adding at most one) stays within the bound,
-- no job of the call can meet the bound and the upper bound is returned as is, with false.
-- Otherwise the pending entries are subtracted: the exact count, with true. A caller that
-- reports a count (CV_FULL) reports only an exact one, since only it can meet the bound.
local function cv_count_waiting(stream, sched, stats, jprefix, group, bound, room)
  stream = cv_level_stream(stream, 1)
  local lkey = stream .. ':levels'
  local lp = string.sub(jprefix, 1, #jprefix - 4) .. 'limit:'
  local n = redis.call('ZCARD', sched) + redis.call('XLEN', stream)
  local gw = tonumber(redis.call('HGET', stats, 'group_waiting'))
  if gw and gw > 0 then n = n + gw end
  -- The levels above 1 the queue's jobs were published with (keys.Queue.Levels, which only
  -- grows) and the limits with a wait list are both sets, usually absent: one EXISTS of the
  -- two costs less than their two SMEMBERS (docs/BENCHMARKS.md, "Bounded queues").
  local rare = redis.call('EXISTS', lkey, lp .. 'ws:') > 0
  local levels = rare and redis.call('SMEMBERS', lkey) or nil
  if rare then
    for _, p in ipairs(levels) do n = n + redis.call('XLEN', cv_level_stream(stream, p)) end
    for _, inst in ipairs(redis.call('SMEMBERS', lp .. 'ws:')) do
      n = n + redis.call('LLEN', lp .. 'w:' .. inst)
    end
  end
  if n + room <= bound then return n, false end
  levels = levels or {}
  levels[#levels + 1] = '1'
  for _, p in ipairs(levels) do
    local s = cv_level_stream(stream, p)
    if redis.call('XLEN', s) > 0 then n = n - cv_stream_group(s, group).pending end
  end
  return n, true
end
