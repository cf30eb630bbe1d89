-- groups.lua: fair groups, each group's window and its wait list.

-- Fair groups (pipeline.WithGroup; docs/STATE_MACHINE.md, "Fair groups"). At most a window of
-- a group's jobs are in the window at once (in a stream, running, or between the two); the
-- others wait, 'queued' with no entry and their payload in their hash, in the group's list,
-- and each job that leaves the window moves the group's next one into the stream in the same
-- step. The stream so holds at most a window of each group's jobs, and a new group's job has
-- at most a window of every other group's ahead of it. The keys sit under the queue's group
-- prefix gp (keys.Queue.GroupPrefix, built here from the job key prefix, in the same tag):
--   gp..'cfg'     the settings: 'window' (absent: 20, keys.DefaultGroupWindow), 'weight:'..g
--                 (absent: 1)
--   gp..'on'      set by the queue's first grouped job: finish.lua looks for groups only then
--   gp..'in:'..g  the set of the ids of g's jobs in the window (SADD/SREM: a repeated step
--                 cannot take or give back a place twice)
--   gp..'w:'..g   the list of the ids of g's waiting jobs, first come first in
--   gp..'ws'      the set of the groups with waiting jobs; gp..'as' those with jobs in the window
-- The stats hash's 'group_waiting' counts the waiting jobs (a gauge; keys.StatGroupWaiting).

-- The group prefix of the queue whose job key prefix is jprefix ('...:job:').
local function cv_group_prefix(jprefix)
  return string.sub(jprefix, 1, #jprefix - 4) .. 'group:'
end

-- How many of group g's jobs the window holds: the window times g's weight.
local function cv_group_room(gp, g)
  local c = redis.call('HMGET', gp .. 'cfg', 'window', 'weight:' .. g)
  return cv_num(c[1], 20) * cv_num(c[2], 1) -- 20: keys.DefaultGroupWindow
end

-- Takes a place in g's window for job id when one is free and none of g's jobs waits ahead of
-- it, or when the job holds one already (a job deferred by a limit keeps its place). Returns
-- whether the job may go into its stream now; when not, the caller makes it wait
-- (cv_group_wait).
local function cv_group_enter(gp, g, id)
  local inset = gp .. 'in:' .. g
  if redis.call('SISMEMBER', inset, id) == 1 then return true end
  if redis.call('EXISTS', gp .. 'w:' .. g) == 1 or
    redis.call('SCARD', inset) >= cv_group_room(gp, g) then
    return false
  end
  redis.call('SADD', inset, id)
  redis.call('SADD', gp .. 'as', g)
  redis.call('SET', gp .. 'on', '1')
  return true
end

-- Puts job id last in g's wait list. The caller leaves its hash 'queued', with no entry and
-- its payload and metadata.
local function cv_group_wait(gp, g, id)
  redis.call('RPUSH', gp .. 'w:' .. g, id)
  redis.call('SADD', gp .. 'ws', g)
  redis.call('SET', gp .. 'on', '1')
  redis.call('HINCRBY', string.sub(gp, 1, -7) .. 'stats', 'group_waiting', 1)
end

-- Moves waiting job id into its stream (its priority level's) as promote.lua moves a due job:
-- the entry starts attempt + 1. Returns false, moving nothing, when the job no longer waits.
local function cv_group_start(stream, jobkey, id, now)
  local h = redis.call('HMGET', jobkey, 'status', 'entry', 'type', 'payload', 'metadata',
    'attempt', 'max_retries', 'timeout_ms', 'priority', 'limit_key')
  if h[1] ~= 'queued' or (h[2] and h[2] ~= '') then return false end
  local e = cv_xadd(cv_level_stream(stream, h[9]), id, h[4], h[5], h[3], cv_num(h[6], 0) + 1,
    h[7], h[8], h[10])
  redis.call('HSET', jobkey, 'entry', e, 'enqueued_at', now)
  redis.call('HDEL', jobkey, 'payload', 'metadata')
  redis.call('HINCRBY', jobkey, 'version', 1)
  return true
end

-- Gives back job id's place in g's window, when it holds one, and moves g's next waiting jobs
-- into the stream while the window has room (more than one when the window was raised).
-- stream is the queue's stream (level 1), jprefix its job key prefix.
local function cv_group_leave(gp, g, id, stream, jprefix, now)
  local inset = gp .. 'in:' .. g
  if redis.call('SREM', inset, id) == 0 then return end
  local n = redis.call('SCARD', inset)
  local w = gp .. 'w:' .. g
  if redis.call('EXISTS', w) == 1 then
    local room, moved = cv_group_room(gp, g), 0
    while n < room do
      local nid = redis.call('LPOP', w)
      if not nid then break end
      moved = moved + 1
      if cv_group_start(stream, jprefix .. nid, nid, now) then
        redis.call('SADD', inset, nid)
        n = n + 1
      end
    end
    if moved > 0 then
      redis.call('HINCRBY', string.sub(gp, 1, -7) .. 'stats', 'group_waiting', -moved)
    end
    if redis.call('EXISTS', w) == 0 then redis.call('SREM', gp .. 'ws', g) end
  end
  if n == 0 then redis.call('SREM', gp .. 'as', g) end
end

-- The job at jobkey leaves its group's window, when it has a group (one HGET). Every way a job
-- leaves the window comes here: an outcome (finish.lua), recovery to the dead set, a cancel.
local function cv_group_out(jobkey, id, stream, jprefix, now)
  local g = redis.call('HGET', jobkey, 'group')
  if g then cv_group_leave(cv_group_prefix(jprefix), g, id, stream, jprefix, now) end
end

-- Cancel's part: a waiting job (status 'queued', no entry) leaves its group's wait list; any
-- other leaves the window (cv_group_out).
local function cv_group_cancel(jobkey, id, stream, jprefix, now, status, entry)
  local g = redis.call('HGET', jobkey, 'group')
  if not g then return end
  local gp = cv_group_prefix(jprefix)
  if status == 'queued' and (not entry or entry == '') then
    local w = gp .. 'w:' .. g
    if redis.call('LREM', w, 1, id) > 0 then
      redis.call('HINCRBY', string.sub(gp, 1, -7) .. 'stats', 'group_waiting', -1)
      if redis.call('EXISTS', w) == 0 then redis.call('SREM', gp .. 'ws', g) end
    end
    return
  end
  cv_group_leave(gp, g, id, stream, jprefix, now)
end

-- Replay's gate for dead job id of group g (its hash at jobkey): when no place in g's window is
-- free, the job is replayed into g's wait list instead of the stream ('queued', attempt 0, no
-- entry, out of the dead set) and this returns true; else it takes a place and returns false,
-- for the caller to add its entry.
local function cv_group_replay_held(jobkey, id, g, now, dead)
  local gp = cv_group_prefix(string.sub(jobkey, 1, #jobkey - #id))
  if cv_group_enter(gp, g, id) then return false end
  redis.call('HSET', jobkey, 'status', 'queued', 'enqueued_at', now, 'attempt', 0, 'run_at', now)
  redis.call('HDEL', jobkey, 'completed_at', 'result', 'entry')
  redis.call('HINCRBY', jobkey, 'version', 1)
  redis.call('ZREM', dead, id)
  cv_group_wait(gp, g, id)
  return true
end
