-- workflows.lua: a workflow's tasks, released, canceled and resumed as their dependencies end.

-- Workflows (docs/STATE_MACHINE.md, "Workflows"). A workflow's tasks are jobs of one queue
-- (partition) whose hashes name the workflow's hash ('wf', keys.Queue.Workflow), their name in
-- it ('wf_task'), the tasks they wait for and that wait for them ('wf_deps', 'wf_next': ids,
-- space-separated), and how many of their dependencies are still to complete ('wf_left'). A
-- task with dependencies is published 'waiting'; the script that ends its last dependency puts
-- it into the stream, in the same call. The workflow's hash counts its tasks' outcomes.

-- The queue's index of waiting tasks (keys.Queue.WorkflowWaiting) from its job key prefix
-- ('...:job:'): a sorted set of the ids of the tasks whose status is 'waiting', scored by
-- their publish time, which every move into or out of 'waiting' keeps, so that its size is the
-- waiting gauge and Inspector.List pages it.
local function cv_wf_waiting(jprefix)
  return string.sub(jprefix, 1, #jprefix - 4) .. 'workflows:waiting'
end

-- Puts waiting task `id` into `stream`: the transition that starts it like any queued job.
-- When its dependencies' process spans were traced (their traceparents kept in the workflow's
-- hash, 't:' .. id, by cv_wf_end), the first 32 of them go into the task's metadata under
-- 'tracelinks' (keys.EntryTracelinks, space-separated): its process span links to them.
local function cv_wf_release(jprefix, id, stream, now, wfkey)
  local k = jprefix .. id
  local h = redis.call('HMGET', k, 'type', 'payload', 'metadata', 'max_retries', 'timeout_ms',
    'wf_deps')
  local md = h[3]
  if h[6] then
    local f = {}
    for dep in string.gmatch(h[6], '%S+') do
      f[#f + 1] = 't:' .. dep
      if #f == 32 then break end
    end
    local links = {}
    for _, v in ipairs(redis.call('HMGET', wfkey, unpack(f))) do
      if v then links[#links + 1] = v end
    end
    if #links > 0 then
      local t = {}
      if md and md ~= '' then t = cmsgpack.unpack(md) end
      t['tracelinks'] = table.concat(links, ' ')
      md = cmsgpack.pack(t)
    end
  end
  local e = cv_xadd(cv_level_stream(stream, 1), id, h[2], md, h[1], '1', h[4], h[5])
  redis.call('HSET', k, 'status', 'queued', 'entry', e, 'enqueued_at', now, 'run_at', now)
  redis.call('HDEL', k, 'payload', 'metadata')
  redis.call('HINCRBY', k, 'version', 1)
  redis.call('ZREM', cv_wf_waiting(jprefix), id)
end

-- Lets a workflow's hash expire once every task is final and none is dead (a dead task may
-- still be replayed, and the workflow then resumes), stamping when it finished.
local function cv_wf_settle(wfkey, now)
  local h = redis.call('HMGET', wfkey, 'tasks', 'completed', 'failed', 'canceled', 'purged',
    'retention_ms')
  if cv_num(h[3], 0) > 0 then return end
  if cv_num(h[2], 0) + cv_num(h[4], 0) + cv_num(h[5], 0) < cv_num(h[1], 0) then return end
  redis.call('HSET', wfkey, 'finished_at', now)
  redis.call('PEXPIRE', wfkey, h[6] or '86400000')
end

-- The cascade's work list of the queue whose job key prefix is jprefix ('...:job:';
-- keys.Queue.WorkflowCascade): the edges of ended tasks still to follow, each item one
-- task's, as lines: its outcome ('C', 'F' or 'X'), the outcome of the task the cascade began
-- with, that task's id (the 'canceled_by' of what it cancels), the workflow's hash, the ids
-- still to follow (space-separated), then the reason a task it cancels is given (the rest,
-- which may hold newlines). The ids are in the item, not read again from the task's hash,
-- which may be gone by then (a completed task kept only as a tombstone).
local function cv_wf_list(jprefix)
  return string.sub(jprefix, 1, #jprefix - 4) .. 'workflows:cascade'
end

-- Follows up to the budget left in ctx of the edges of the items in ctx.todo (tables {e, o,
-- origin, wfkey, ids, reason}, ids a string), then of the queue's work list (cv_wf_list),
-- and puts what is left on the list. One edge costs one HMGET of two fields; a dependent it
-- cancels costs a few calls more, and one HMGET of its own dependents, read once, when it is
-- canceled: a death's cascade costs Redis work in proportion to its edges and tasks, never
-- to an edge times a task's dependents. A dependent of a completed task is counted down and
-- goes into the stream at zero (cv_wf_release); one of a dead or canceled task is canceled
-- (marked 'canceled_by' the task the cascade began with, its reason in 'last_error'), and
-- its own dependents become an item, unless it is a Finally task, which counts the outcome
-- and runs once all its dependencies are final. The tasks a dead task canceled keep their
-- hashes (no TTL) for a replay of it to restore (cv_wf_resume); those a caller's cancel
-- canceled expire with the workflow's retention. ctx: jprefix, stream, stats (the queue's
-- stats hash: the cascade's cancels are counted there as every cancel is), now, ev (one
-- 'canceled' event line per canceled task), budget (edges), todo; all = true follows every
-- edge whatever the budget (a replay or a purge must see a workflow whose cascade is over).
-- Sets ctx.left to the items left on the list and returns the tasks released.
local function cv_wf_follow(ctx)
  local jprefix, list = ctx.jprefix, cv_wf_list(ctx.jprefix)
  local released, canceled = 0, 0
  local keeps, touched = {}, ctx.touched or {}
  local todo, i = ctx.todo, 1
  local empty = false -- the list was found empty, and nothing was put on it since
  while true do
    if i > #todo then
      if ctx.budget <= 0 and not ctx.all then break end
      local raw = redis.call('LPOP', list)
      if not raw then empty = true; break end
      local f, p = {}, 1
      for k = 1, 5 do
        local q = string.find(raw, '\n', p, true)
        f[k] = string.sub(raw, p, q - 1)
        p = q + 1
      end
      todo[#todo + 1] = {f[1], f[2], f[3], f[4], f[5], string.sub(raw, p)}
    end
    local it = todo[i]
    local e, o, origin, wfkey, reason = it[1], it[2], it[3], it[4], it[6]
    touched[wfkey] = true
    local ids, p = it[5], 1
    while true do
      if ctx.budget <= 0 and not ctx.all then break end
      local a, b = string.find(ids, '%S+', p)
      if not a then p = #ids + 1; break end
      p = b + 1
      ctx.budget = ctx.budget - 1
      local d = string.sub(ids, a, b)
      -- The job the calling script is ending (cv_wf_end's): its own end is the caller's.
      if d ~= ctx.skip then
        local dk = jprefix .. d
        local s = redis.call('HMGET', dk, 'status', 'wf_mode')
        if s[2] == '1' then
          if s[1] == 'waiting' then
            if e == 'C' then
              redis.call('HINCRBY', dk, 'wf_done', 1)
            elseif e == 'F' then
              redis.call('HINCRBY', dk, 'wf_failed', 1)
            else
              redis.call('HINCRBY', dk, 'wf_canceled', 1)
            end
            if redis.call('HINCRBY', dk, 'wf_left', -1) <= 0 then
              cv_wf_release(jprefix, d, ctx.stream, ctx.now, wfkey)
              released = released + 1
            end
          end
        elseif e == 'C' then
          -- Counted whatever the task's status, so that a task a replay restores waits for
          -- exactly the dependencies that have not completed; but not for a task whose record
          -- is gone (canceled, its retention ended): HINCRBY would make a hash of that one
          -- field, with no TTL.
          if s[1] and redis.call('HINCRBY', dk, 'wf_left', -1) <= 0 and s[1] == 'waiting' then
            cv_wf_release(jprefix, d, ctx.stream, ctx.now, wfkey)
            released = released + 1
          end
        elseif s[1] == 'waiting' then
          redis.call('HSET', dk, 'status', 'canceled', 'completed_at', ctx.now, 'last_error', reason,
            'canceled_by', origin)
          redis.call('HINCRBY', dk, 'version', 1)
          redis.call('ZREM', cv_wf_waiting(jprefix), d)
          if o == 'X' then
            local keep = keeps[wfkey]
            if not keep then
              keep = redis.call('HGET', wfkey, 'retention_ms') or '86400000'
              keeps[wfkey] = keep
            end
            redis.call('PEXPIRE', dk, keep)
          end
          canceled = canceled + 1
          ctx.ev[#ctx.ev + 1] = 'canceled 0 ' .. d
          local t = redis.call('HMGET', dk, 'wf_task', 'wf_next')
          redis.call('HSET', wfkey, 's:' .. t[1], 'X')
          redis.call('HINCRBY', wfkey, 'canceled', 1)
          if t[2] and t[2] ~= '' then
            todo[#todo + 1] = {'X', o, origin, wfkey, t[2], 'dependency ' .. t[1] .. ' was canceled'}
          end
        end
      end
    end
    if p <= #ids then
      it[5] = string.sub(ids, p)
      break
    end
    i = i + 1
  end
  -- What the budget left: the item begun (its ids from where it stopped) and those after it.
  local rest = {}
  for k = i, #todo do
    local it = todo[k]
    if string.find(it[5], '%S') then rest[#rest + 1] = table.concat(it, '\n') end
  end
  if #rest > 0 then
    cv_call_list('RPUSH', list, {}, rest)
    empty = false
  end
  if canceled > 0 then redis.call('HINCRBY', ctx.stats, 'canceled', canceled) end
  for wfkey in pairs(touched) do cv_wf_settle(wfkey, ctx.now) end
  if empty then ctx.left = 0 else ctx.left = redis.call('LLEN', list) end
  return released
end

-- The edges a script call may follow (cv_wf_follow) before it leaves the rest on the work
-- list, shared by every task the call ends (ev carries it: the one table of a call's events).
-- 128 edges cost Redis about 1.5-6 ms on a loaded 2-core machine (docs/RELIABILITY.md, "Issue 30: a workflow's
-- dependencies and cascades"), so no call that ends tasks blocks it for longer on their
-- account; a workflow of usual width ends within that, with no call more. jobstate.CascadeStep
-- is the same number.
local function cv_wf_budget(ev)
  if not ev.cv_wf_budget then ev.cv_wf_budget = 128 end
  return ev.cv_wf_budget
end

-- Ends task `id` (its hash `jobkey`) in its workflow, if it is a task: o is 'C' (completed,
-- with `result`, and `why` its process span's traceparent or ''), 'F' (dead, with the error
-- `why`) or 'X' (canceled by a caller). Called by every script that ends a job (finish,
-- recover, cancel) before it rewrites the job's hash. The workflow counts the outcome, and
-- the task's dependents are followed (cv_wf_follow) within the call's budget
-- (cv_wf_budget); the rest of the cascade is left on the queue's work list, which the next
-- calls that end tasks of the queue, the wf_cascade.lua calls of the canceling client and
-- the queue's recoverer at each scan go on with (jobstate.FollowCascade). `stats` is the
-- queue's stats hash; `ev` gets one 'canceled' event line per canceled task, and its field
-- cv_wf_left the items the work list holds after the call, 0 when it could not hold any.
-- Returns the number of tasks released into the stream.
local function cv_wf_end(jobkey, id, o, result, why, now, stream, stats, ev)
  local w = redis.call('HMGET', jobkey, 'wf', 'wf_task', 'wf_next')
  if not w[1] then return 0 end
  local wfkey, cname, cnext = w[1], w[2], w[3]
  local jprefix = string.sub(jobkey, 1, #jobkey - #id)
  if o == 'C' then
    if cnext and cnext ~= '' and result and result ~= '' then
      redis.call('HSET', wfkey, 's:' .. cname, o, 'r:' .. cname, result)
    else
      redis.call('HSET', wfkey, 's:' .. cname, o)
    end
    if cnext and cnext ~= '' and why and why ~= '' then
      redis.call('HSET', wfkey, 't:' .. id, why)
    end
    redis.call('HINCRBY', wfkey, 'completed', 1)
  elseif o == 'F' then
    redis.call('HSET', wfkey, 's:' .. cname, o)
    redis.call('HINCRBY', wfkey, 'failed', 1)
  else
    redis.call('HSET', wfkey, 's:' .. cname, o)
    redis.call('HINCRBY', wfkey, 'canceled', 1)
  end
  local todo = {}
  if cnext and cnext ~= '' then
    local reason = ''
    if o == 'F' then
      reason = 'dependency ' .. cname .. ' failed: ' .. string.sub(why or '', 1, 200)
    elseif o == 'X' then
      reason = 'dependency ' .. cname .. ' was canceled'
    end
    todo[1] = {o, o, id, wfkey, cnext, reason}
  end
  local ctx = {jprefix = jprefix, stream = stream, stats = stats, now = now, ev = ev,
    budget = cv_wf_budget(ev), todo = todo, touched = {[wfkey] = true}, skip = id}
  local released = cv_wf_follow(ctx)
  ev.cv_wf_budget, ev.cv_wf_left = ctx.budget, ctx.left
  return released
end

-- Follows the whole of the queue's cascade work list (cv_wf_follow with no budget): a replay
-- or a purge of a task must find every cascade of its workflow over, since it undoes or ends
-- what the cascade did. The list holds edges only between the calls that follow them (a few
-- ms), or after a crash until the queue's recoverer's next scan: this is rare, and then as
-- long as what is left. The tasks it cancels are not announced (a waiter finds them on its
-- fallback read).
local function cv_wf_catch_up(jprefix, now)
  if redis.call('LLEN', cv_wf_list(jprefix)) == 0 then return end
  -- The queue's level-1 stream and stats hash (keys.Queue.Stream, Stats): '...:job:' less 'job:'.
  local base = string.sub(jprefix, 1, #jprefix - 5)
  cv_wf_follow({jprefix = jprefix, stream = base .. ':stream', stats = base .. ':stats', now = now,
    ev = {}, budget = 0, all = true, todo = {}})
end

-- The tasks canceled because of task `id` (the dependents, transitively, whose 'canceled_by'
-- is set), in topological order ('wf_topo'), each as {id, hash fields}.
local function cv_wf_canceled_after(jprefix, next_ids)
  local seen, out, todo, i = {}, {}, {next_ids}, 1
  while i <= #todo do
    local nx = todo[i]
    i = i + 1
    if nx and nx ~= '' then
      for d in string.gmatch(nx, '%S+') do
        if not seen[d] then
          seen[d] = true
          local s = redis.call('HMGET', jprefix .. d, 'status', 'canceled_by', 'wf_topo',
            'wf_next', 'wf_deps', 'wf_task')
          if s[1] == 'canceled' and s[2] then
            out[#out + 1] = {d, s}
            todo[#todo + 1] = s[4]
          end
        end
      end
    end
  end
  table.sort(out, function(a, b) return cv_num(a[2][3], 0) < cv_num(b[2][3], 0) end)
  return out
end

-- Resumes the workflow of dead task `id`, which a replay has just put back into the stream at
-- `now`: the tasks its death canceled wait again, in topological order, each unless another of
-- its dependencies is dead, purged or canceled still; the Finally tasks still waiting forget
-- the outcomes they counted of the task and of those restored. The queue's cascades still on
-- its work list are followed first (cv_wf_catch_up).
local function cv_wf_resume(jobkey, id, now)
  local w = redis.call('HMGET', jobkey, 'wf', 'wf_task', 'wf_next')
  if not w[1] then return end
  local wfkey = w[1]
  local jprefix = string.sub(jobkey, 1, #jobkey - #id)
  cv_wf_catch_up(jprefix, now)
  redis.call('HINCRBY', wfkey, 'failed', -1)
  redis.call('HDEL', wfkey, 's:' .. w[2], 'finished_at')
  local restored = {{id, w[3], 'wf_failed'}}
  for _, c in ipairs(cv_wf_canceled_after(jprefix, w[3])) do
    -- A dependency's outcome is read from the workflow's hash, not its job's status: a task
    -- purged from the dead set has no hash left ('P'), and one restored just before has its
    -- outcome cleared.
    local ok = true
    for dep in string.gmatch(c[2][5] or '', '%S+') do
      local o = redis.call('HGET', wfkey, 's:' .. string.match(dep, '([^.]+)$'))
      if o == 'F' or o == 'X' or o == 'P' then ok = false; break end
    end
    if ok then
      local dk = jprefix .. c[1]
      redis.call('HSET', dk, 'status', 'waiting')
      redis.call('HDEL', dk, 'canceled_by', 'last_error', 'completed_at')
      redis.call('HINCRBY', dk, 'version', 1)
      redis.call('ZADD', cv_wf_waiting(jprefix), redis.call('HGET', dk, 'created_at') or now, c[1])
      redis.call('HINCRBY', wfkey, 'canceled', -1)
      redis.call('HDEL', wfkey, 's:' .. c[2][6])
      restored[#restored + 1] = {c[1], c[2][4], 'wf_canceled'}
    end
  end
  for _, r in ipairs(restored) do
    for d in string.gmatch(r[2] or '', '%S+') do
      local dk = jprefix .. d
      local s = redis.call('HMGET', dk, 'status', 'wf_mode')
      if s[1] == 'waiting' and s[2] == '1' then
        redis.call('HINCRBY', dk, r[3], -1)
        redis.call('HINCRBY', dk, 'wf_left', 1)
      end
    end
  end
end

-- Task `id`, dead, is being purged: the workflow counts it purged instead of dead, and the
-- tasks its death canceled (kept for a replay that can no longer come) expire with the
-- workflow's retention. The queue's cascades still on its work list are followed first
-- (cv_wf_catch_up).
local function cv_wf_purged(jobkey, id, now)
  local w = redis.call('HMGET', jobkey, 'wf', 'wf_task', 'wf_next')
  if not w[1] then return end
  local wfkey = w[1]
  cv_wf_catch_up(string.sub(jobkey, 1, #jobkey - #id), now)
  local keep = redis.call('HGET', wfkey, 'retention_ms') or '86400000'
  for _, c in ipairs(cv_wf_canceled_after(string.sub(jobkey, 1, #jobkey - #id), w[3])) do
    redis.call('PEXPIRE', string.sub(jobkey, 1, #jobkey - #id) .. c[1], keep)
  end
  if redis.call('EXISTS', wfkey) == 0 then return end
  redis.call('HINCRBY', wfkey, 'failed', -1)
  redis.call('HINCRBY', wfkey, 'purged', 1)
  redis.call('HSET', wfkey, 's:' .. w[2], 'P')
  cv_wf_settle(wfkey, now)
end
