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
local function cv_count_waiting(stream, sched, stats, jprefix, group)
  local n = redis.call('ZCARD', sched) + math.max(0, cv_num(redis.call('HGET', stats, 'group_waiting'), 0))
  -- Level 1, then the levels the queue's jobs were published with (keys.Queue.Levels, which
  -- only grows): one SMEMBERS, usually empty, in place of three XLEN.
  local levels = redis.call('SMEMBERS', cv_level_stream(stream, 1) .. ':levels')
  levels[#levels + 1] = '1'
  for _, p in ipairs(levels) do
    local s = cv_level_stream(stream, p)
    local len = redis.call('XLEN', s)
    if len > 0 then n = n + len - cv_stream_group(s, group).pending end
  end
  local lp = string.sub(jprefix, 1, #jprefix - 4) .. 'limit:'
  for _, inst in ipairs(redis.call('SMEMBERS', lp .. 'ws:')) do
    n = n + redis.call('LLEN', lp .. 'w:' .. inst)
  end
  return n
end
