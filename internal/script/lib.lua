-- lib.lua: Lua shared by every Conveyor script. internal/script joins it in front of each
-- script's own source when the script is created, so each script is self-contained on the
-- server (EVALSHA of the joined text). Field names mirror internal/keys; keep them in step.
--
-- Two kinds of key are built inside scripts instead of being passed in KEYS: job hashes found
-- through an id that only Redis knows (an id in the scheduled set, or in a stream entry) and a
-- job's unique key (named in its hash). Both carry the queue's hash tag, so they live in the
-- same cluster slot as the keys that were passed in.

-- Reply codes. Every script answers {code, ...}: a code from this list, then what the script
-- says it returns with it. internal/script names the same codes in Go (Code); a test keeps the
-- two lists in step. A script that applies many items (finish, enqueue) answers CV_OK and then
-- one code per item.
local CV_OK = 0
local CV_NOT_FOUND = 1
local CV_EXISTS = 2
local CV_UNIQUE_HELD = 3
local CV_REFUSED = 4
local CV_WRONG_STATE = 5
local CV_NO_TYPE = 6
local CV_LOCK_LOST = 7
local CV_DIED = 8
local CV_CONFLICT = 9
local CV_DEFERRED = 10

-- The fields of stream entry `id` as a table, or nil when the entry is gone.
local function cv_entry(stream, id)
  local r = redis.call('XRANGE', stream, id, id)
  if #r == 0 then return nil end
  local f, t = r[1][2], {}
  for i = 1, #f, 2 do t[f[i]] = f[i + 1] end
  return t
end

-- Appends the stream entry that carries job `id` and returns the entry's id. Every entry has the
-- same fields in the same order (Redis then stores the names once per listpack node); the
-- 'conveyor' field packs "<attempt> <max_retries> <timeout_ms> <type>" (keys.FormatEntryJob).
-- A job with a limit key (pipeline.WithLimitKey) also carries it, last ('limit_key'), so that
-- a worker holds it to its per-key limits from the entry alone (admission reads no hash).
local function cv_xadd(stream, id, payload, metadata, typ, attempt, max_retries, timeout_ms, lkey)
  if lkey and lkey ~= '' then
    return redis.call('XADD', stream, '*',
      '_watermill_message_uuid', id, 'payload', payload or '', 'metadata', metadata or '',
      'conveyor', attempt .. ' ' .. (max_retries or 0) .. ' ' .. (timeout_ms or 0) .. ' ' .. (typ or ''),
      'limit_key', lkey)
  end
  return redis.call('XADD', stream, '*',
    '_watermill_message_uuid', id, 'payload', payload or '', 'metadata', metadata or '',
    'conveyor', attempt .. ' ' .. (max_retries or 0) .. ' ' .. (timeout_ms or 0) .. ' ' .. (typ or ''))
end

-- The stream of priority level p (a job hash's 'priority' field: nil, '' or '1' is level 1)
-- of the queue whose level-1 stream is `stream`; keys.Queue.LevelStream names the same keys.
-- `stream` may be any level's stream of the queue (a script with an entry in hand is given the
-- stream the entry is in): its level suffix is dropped first. A level-1 stream ends in
-- 'stream', so the suffix never matches one.
local function cv_level_stream(stream, p)
  if string.byte(stream, #stream - 2) == 58 then stream = string.gsub(stream, ':p[2-4]$', '') end
  local n = tonumber(p)
  if n == nil or n <= 1 or n > 4 then return stream end
  return stream .. ':p' .. n
end

-- Records that the queue of `stream` (any level's) has jobs of level p > 1, in the set
-- keys.Queue.Levels (the level-1 stream's name .. ':levels'), which workers read to learn
-- which level streams to read.
local function cv_add_level(stream, p)
  redis.call('SADD', cv_level_stream(stream, 1) .. ':levels', p)
end

-- The parts of an entry's 'conveyor' field: attempt, max_retries, timeout_ms (numbers) and
-- type, or nil when the field is missing or malformed.
local function cv_job(f)
  local c = f['conveyor']
  if not c then return nil end
  local a, m, t, typ = string.match(c, '^(%d+) (%d+) (%d+) (.+)$')
  if not a then return nil end
  return tonumber(a), tonumber(m), tonumber(t), typ
end

-- Runs redis.call(cmd, key, <args...>, <list...>) with list in chunks: Lua's unpack fails past
-- a few thousand values (LUAI_MAXCSTACK, 8000), after the script's earlier writes were applied,
-- and scripts are not rolled back. args is a Lua array of the arguments before the list.
local function cv_call_list(cmd, key, args, list)
  local step = 1000
  if #list <= step then
    if #args == 0 then return redis.call(cmd, key, unpack(list)) end
    local a = {cmd, key}
    for _, v in ipairs(args) do a[#a + 1] = v end
    for _, v in ipairs(list) do a[#a + 1] = v end
    return redis.call(unpack(a))
  end
  for i = 1, #list, step do
    local a = {cmd, key}
    for _, v in ipairs(args) do a[#a + 1] = v end
    for j = i, math.min(i + step - 1, #list) do a[#a + 1] = list[j] end
    redis.call(unpack(a))
  end
end

-- What differs between the job at jobkey and a publish of typ and payload under its id: nil
-- when nothing does (or when the record keeps too little to tell: a tombstone), else the names
-- of what differs, comma-joined. Metadata is not compared: its encoding has no fixed order.
local function cv_differs(jobkey, stream, typ, payload)
  local h = redis.call('HMGET', jobkey, 'type', 'payload', 'entry')
  if not h[1] then return nil end
  local p = h[2]
  if not p and h[3] and h[3] ~= '' then
    local f = cv_entry(stream, h[3])
    if f then p = f['payload'] or '' end
  end
  local d = {}
  if h[1] ~= typ then d[#d + 1] = 'type' end
  if p and p ~= payload then d[#d + 1] = 'payload' end
  if #d == 0 then return nil end
  return table.concat(d, ',')
end

-- Reports whether a job is live on entry: `h` is HMGET(jobkey, 'entry', 'status', ...), and the
-- entry still carries the job and the job is queued or in progress. This is the fence of every
-- transition a worker or recovery asks for with an entry in hand (finish, release, recover).
local function cv_live(h, entry)
  return h[1] == entry and (h[2] == 'queued' or h[2] == 'in_progress')
end

-- Acknowledges and deletes the entries listed in ids (a Lua array), in one call each (per
-- thousand).
local function cv_drop(stream, group, ids)
  if #ids == 0 then return end
  if #ids <= 1000 then
    redis.call('XACK', stream, group, unpack(ids))
    redis.call('XDEL', stream, unpack(ids))
  else
    cv_call_list('XACK', stream, {group}, ids)
    cv_call_list('XDEL', stream, {}, ids)
  end
end

-- After `id` was added to the scheduled set with score `due`: when it is now the earliest, tell
-- sleeping schedulers on the wake channel so they wake early.
local function cv_wake_if_first(scheduled, channel, id, due)
  local first = redis.call('ZRANGE', scheduled, 0, 0)
  if first[1] == id then redis.call('PUBLISH', channel, due) end
end

-- Announces jobs' changes of status on the queue's events channel (internal/events) as one
-- message: lines is a Lua array of "<status> <attempt> <id>" strings. cmd is what the caller
-- found the server supports, 'SPUBLISH' or 'PUBLISH'; anything else (normally '') publishes
-- nothing, so a script never fails on a server without sharded Pub/Sub.
local function cv_announce(cmd, channel, lines)
  if #lines > 0 and (cmd == 'SPUBLISH' or cmd == 'PUBLISH') then
    redis.call(cmd, channel, table.concat(lines, '\n'))
  end
end

-- Copies payload and metadata from a stream entry's fields into the job hash, for a job that
-- is leaving the stream but keeps its record.
local function cv_keep_payload(jobkey, f)
  if f then
    redis.call('HSET', jobkey, 'payload', f['payload'] or '', 'metadata', f['metadata'] or '')
  end
end

-- Frees the job's unique key when the job still holds it.
local function cv_release_unique(jobkey, id)
  local u = redis.call('HGET', jobkey, 'unique')
  if u and redis.call('GET', u) == id then redis.call('DEL', u) end
end

-- Marks a job failed for good and adds it to the dead set. Dead jobs keep their hash (no TTL)
-- until they are replayed or purged.
local function cv_to_dead(jobkey, dead, id, now, err)
  redis.call('HSET', jobkey, 'status', 'failed', 'last_error', err, 'completed_at', now)
  redis.call('HDEL', jobkey, 'entry')
  redis.call('HINCRBY', jobkey, 'version', 1)
  redis.call('ZADD', dead, now, id)
  cv_release_unique(jobkey, id)
end

-- Records a stream entry that cannot run as a job (unreadable, or naming no job of its own) as
-- a dead job, so nothing is lost silently. The record keeps the entry's own payload, and its
-- metadata when that decodes as the worker reads it (pipeline's entryUnmarshaller: a msgpack
-- map of strings); its type only when the entry states one and its metadata is fit to run
-- (no key empty or starting with '_', which is reserved), so a replay runs exactly what the
-- entry carried, or is refused for want of a type. The worker's path (finish.lua) and
-- recovery's (recover.lua) both come here. The caller acknowledges and deletes the entry.
local function cv_dead_entry(jobkey, dead, id, f, reason, now)
  local _, max_retries, timeout_ms, typ = cv_job(f or {})
  local md = (f and f['metadata']) or ''
  if md ~= '' then
    local ok, t = pcall(cmsgpack.unpack, md)
    if not ok or type(t) ~= 'table' then
      md, typ = '', nil
    else
      for k, v in pairs(t) do
        if type(k) ~= 'string' or type(v) ~= 'string' then md, typ = '', nil; break end
        if k == '' or string.byte(k, 1) == 95 then typ = nil end
      end
    end
  end
  redis.call('HSET', jobkey, 'type', typ or '', 'status', 'failed', 'attempt', '0',
    'max_retries', max_retries or 0, 'timeout_ms', timeout_ms or 0, 'created_at', now,
    'run_at', now, 'completed_at', now, 'payload', (f and f['payload']) or '', 'metadata', md,
    'last_error', reason, 'version', '1')
  redis.call('ZADD', dead, now, id)
end

-- A job id as the client accepts it (internal/keys.ValidateID).
local function cv_valid_id(id)
  return id ~= nil and id ~= false and #id > 0 and #id <= 128 and
    string.match(id, '^[%w%._:%-]+$') ~= nil
end

-- The hash field `f` as a number, or d when absent.
local function cv_num(v, d)
  local n = tonumber(v)
  if n == nil then return d end
  return n
end

-- The attempt number that stream entry f (of the job at jobkey) starts: its `conveyor` field's,
-- or, for an entry adopted from another Watermill publisher (no such field), the job's own.
local function cv_entry_attempt(f, jobkey)
  local n = cv_job(f)
  if n then return n end
  return cv_num(redis.call('HGET', jobkey, 'attempt'), 1)
end

-- Puts a job whose stream entry `old` (fields f) did not finish back into the stream as a new
-- entry that starts attempt `next_attempt`, records `attempt` executions and the reason, and
-- acknowledges and deletes the old entry. Returns the new entry id. The new entry is always in
-- Conveyor's layout: an adopted entry's type and settings come from the job's hash.
local function cv_replace(stream, group, jobkey, id, old, f, next_attempt, attempt, reason, now)
  local _, max_retries, timeout_ms, typ = cv_job(f)
  if not typ then
    local h = redis.call('HMGET', jobkey, 'type', 'max_retries', 'timeout_ms')
    typ, max_retries, timeout_ms = h[1], h[2], h[3]
  end
  local e = cv_xadd(stream, id, f['payload'], f['metadata'], typ, next_attempt,
    max_retries, timeout_ms, f['limit_key'])
  redis.call('HSET', jobkey, 'status', 'queued', 'entry', e, 'enqueued_at', now,
    'attempt', attempt)
  if reason then redis.call('HSET', jobkey, 'last_error', reason) end
  redis.call('HINCRBY', jobkey, 'version', 1)
  redis.call('XACK', stream, group, old)
  redis.call('XDEL', stream, old)
  return e
end

-- Appends an attempt that ended without completing its job to the job's attempt history
-- (keys.FieldAttempts): its number, worker, start and end (unix ms; start '0' when unknown),
-- outcome (keys.Attempt*: retry, snooze, lost, failed) and error. One line an attempt, tabs and
-- newlines in the worker and the error made spaces, the error cut to 512 bytes
-- (keys.MaxAttemptError); the last 20 kept (keys.MaxAttemptHistory). Only the paths off the
-- happy one call it (a retry, a snooze, a death, a lost worker): a completed attempt is the
-- hash's own worker, started_at and completed_at, and costs nothing more.
local function cv_attempt(jobkey, attempt, worker, started, ended, outcome, err)
  local w = string.gsub(worker or '', '[\t\r\n]', ' ')
  local e = string.gsub(string.sub(err or '', 1, 512), '[\t\r\n]', ' ')
  local rec = attempt .. '\t' .. w .. '\t' .. (started or '0') .. '\t' .. ended .. '\t' ..
    outcome .. '\t' .. e
  local cur = redis.call('HGET', jobkey, 'attempts')
  if cur and cur ~= '' then
    local n = 1
    for _ in string.gmatch(cur, '\n') do n = n + 1 end
    if n >= 20 then cur = string.sub(cur, string.find(cur, '\n', 1, true) + 1) end
    rec = cur .. '\n' .. rec
  end
  redis.call('HSET', jobkey, 'attempts', rec)
end

-- Adds finished jobs to one of a queue's indexes of them (keys.Queue.Completed, Canceled): a
-- sorted set whose members are chunks, each the ids of one call (items is {score, id, ...}),
-- space-separated in the order given, scored by the call's latest finish. One ZADD a call, not
-- one a job, is what keeps the index off the hot path's bill: a worker's finish call completes
-- up to 50 jobs, and an insert into (and, once full, a delete from) a sorted set of 10,000 ids
-- cost Redis 1-2 us a job (docs/BENCHMARKS.md, issue 20). nkey (keys.IndexCount) counts the ids held. Then
-- it trims, oldest chunk first, the chunks finished before cutoff (unix ms: the retention ended,
-- so their records expired) and those that take the count beyond cap (keys.FinishedIndexCap),
-- at most 4 chunks a call (a backlog, a retention or cap lowered, goes over a few calls) and
-- never the chunk just added: the index holds at most cap ids plus one call's. An id whose
-- record expired sooner (a job with a shorter retention of its own) is skipped by the listing
-- until its chunk goes.
local function cv_index(key, nkey, items, cutoff, cap)
  if #items == 0 then return end
  local ids, top = {}, 0
  for k = 1, #items, 2 do
    local t = tonumber(items[k])
    if t > top then top = t end
    ids[#ids + 1] = items[k + 1]
  end
  local member = table.concat(ids, ' ')
  redis.call('ZADD', key, top, member)
  local n = redis.call('INCRBY', nkey, #ids)
  for _ = 1, 4 do
    local old = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if #old == 0 or old[1] == member then break end
    if tonumber(old[2]) >= cutoff and n <= cap then break end
    local _, spaces = string.gsub(old[1], ' ', '')
    redis.call('ZREM', key, old[1])
    n = redis.call('DECRBY', nkey, spaces + 1)
  end
end

-- Flow-control limits (internal/jobstate/limits.go; admit.lua leases and admits, leases.lua
-- gives back). A limit's state lives under the queue's limit prefix lp (keys.Queue.LimitPrefix),
-- per scope instance inst ('q', 'qk:<key>', 't:<type>', 'tk:<type> <key>': a type has no space):
--   lp..'c:'..inst  its concurrency slots taken: '<holder>#<n>' names leased by workers (and,
--                   from before leases, the ids of jobs that name it in 'limit_slots')
--   lp..'w:'..inst  the list of the ids of the jobs waiting for one, first come first woken
--   lp..'rl:'..inst its rate's log: the grants of the last interval (cv_rate_read)
--   lp..'h:'..inst  the latest due time (unix us) handed to a job its rate deferred
--   lp..'ws:'       the set of the instances that have waiting jobs
--   lp..'hz:'       the holders (worker sessions) with a lease, scored by when it runs out
--   lp..'hs:'..h    the instances holder h has taken slots of
-- A waiting job is 'scheduled', out of the scheduled set, with 'limit_wait' naming the instance
-- it waits for.

-- One limit's value in a limits hash as {rate, interval (us), T (us per job), conc}
-- (jobstate.LimitConfig's JSON names, read as fields: rate, interval_ms, concurrency), or false
-- when it is absent, does not decode, or sets nothing: no limit.
local function cv_limit_decode(v)
  if not v then return false end
  local ok, c = pcall(cjson.decode, v)
  if not ok or type(c) ~= 'table' then return false end
  local l = {rate = tonumber(c.rate) or 0, interval = (tonumber(c.interval_ms) or 0) * 1000,
    conc = tonumber(c.concurrency) or 0}
  if l.rate > 0 and l.interval > 0 then l.T = l.interval / l.rate else l.rate = 0 end
  if l.rate > 0 or l.conc > 0 then return l end
  return false
end

-- The limits of a limits hash, by scope field (limits[field] is a limit as cv_limit_decode
-- makes it, or false), read lazily: a field is read the first time a call asks for it, and
-- cv_limit_scopes reads a job's scopes together in one HMGET. Never the whole hash: a queue may
-- have many limits (up to pipeline.MaxQueueLimits), and a call needs only those of the scopes
-- of its jobs and instances, so its cost does not grow with the others (docs/BENCHMARKS.md,
-- "Admission with many limits").
local function cv_read_limits(key)
  local limits, mt = {}, {}
  -- Reads the fields of fs not read yet, in one HMGET.
  function mt.load(fs)
    local want = {}
    for _, f in ipairs(fs) do
      if rawget(limits, f) == nil then want[#want + 1] = f end
    end
    if #want == 0 then return end
    local vs = redis.call('HMGET', key, unpack(want))
    for i, f in ipairs(want) do rawset(limits, f, cv_limit_decode(vs[i])) end
  end
  mt.__index = function(t, f)
    mt.load({f})
    return rawget(t, f)
  end
  return setmetatable(limits, mt)
end

-- The scope field (the limits hash's) of instance inst.
local function cv_limit_field(inst)
  local b = string.byte(inst, 2)
  if b == 107 then -- 'qk:<key>', 'tk:<type> <key>'
    if string.byte(inst, 1) == 113 then return 'qk' end
    local sp = string.find(inst, ' ', 4, true)
    if sp then return string.sub(inst, 1, sp - 1) end
  end
  return inst -- 'q', 't:<type>'
end

-- The scopes that hold a job of type typ and limit key key ('' for none), as {instance, limit}
-- pairs, made once per distinct type and key in a call (cache is the call's table).
local function cv_limit_scopes(limits, typ, key, cache)
  local ck = typ
  if key ~= '' then ck = typ .. ' ' .. key end -- a type has no space
  local sc = cache[ck]
  if sc then return sc end
  sc = {}
  local mt = getmetatable(limits)
  if mt and mt.load then
    if key ~= '' then
      mt.load({'q', 't:' .. typ, 'qk', 'tk:' .. typ})
    else
      mt.load({'q', 't:' .. typ})
    end
  end
  local function add(field, inst)
    local l = limits[field]
    if l then sc[#sc + 1] = {inst, l} end
  end
  add('q', 'q')
  add('t:' .. typ, 't:' .. typ)
  if key ~= '' then
    add('qk', 'qk:' .. key)
    add('tk:' .. typ, 'tk:' .. typ .. ' ' .. key)
  end
  cache[ck] = sc
  return sc
end

-- Rates. A rate of N per interval admits at most N in any window of the interval (a burst of N,
-- then the next once the first of them is an interval old), by Redis's clock. Its state is the
-- log of its grants within the last interval: lp..'rl:'..inst holds 'time count' pairs (unix
-- us, oldest first, space-separated), one per call that granted tokens, at most 32: past that
-- the two closest are merged into the later one, which can only make the limit stricter for a
-- while, never looser. (GCRA, one number per instance, was used before; with a burst of N it let
-- 2N - 1 start within one interval.) The log of instance key at now, without what is an
-- interval old: an array of {time, count}.
local function cv_rate_read(key, now, interval)
  local log = {}
  local v = redis.call('GET', key)
  if not v then return log end
  local cut, t = now - interval, nil
  for w in string.gmatch(v, '%S+') do
    if not t then
      t = tonumber(w) or 0
    else
      local c = tonumber(w) or 0
      if t > cut and c > 0 then log[#log + 1] = {t, c} end
      t = nil
    end
  end
  return log
end

-- The grants in log.
local function cv_rate_count(log)
  local n = 0
  for _, e in ipairs(log) do n = n + e[2] end
  return n
end

-- Records c grants at time at (the stamp leases.lua gives them back by), in time order.
local function cv_rate_add(log, at, c)
  local k = #log
  while k > 0 and log[k][1] > at do k = k - 1 end
  if k > 0 and log[k][1] == at then
    log[k][2] = log[k][2] + c
  else
    table.insert(log, k + 1, {at, c})
  end
  if #log > 32 then
    local best, gap = 1, nil
    for k = 1, #log - 1 do
      local g = log[k + 1][1] - log[k][1]
      if not gap or g < gap then best, gap = k, g end
    end
    log[best + 1][2] = log[best + 1][2] + log[best][2]
    table.remove(log, best)
  end
end

-- When a rate of log's instance next admits one: once the grant that makes the rate-th from the
-- newest is an interval old. nil when it admits one now.
local function cv_rate_due(log, rate, interval)
  local n = 0
  for k = #log, 1, -1 do
    n = n + log[k][2]
    if n >= rate then return log[k][1] + interval end
  end
  return nil
end

-- Takes back c tokens granted at stamp (cv_rate_add's now): from the entry that holds them, the
-- first at or after stamp (merges move counts later, never earlier). Tokens an interval old no
-- longer count, and are not looked for.
local function cv_rate_give(log, stamp, c)
  for k, e in ipairs(log) do
    if e[1] >= stamp then
      e[2] = e[2] - math.min(c, e[2])
      if e[2] == 0 then table.remove(log, k) end
      return
    end
  end
end

-- Stores log at key, kept until its newest entry is an interval old.
local function cv_rate_save(key, log, now, interval)
  if #log == 0 then
    redis.call('DEL', key)
    return
  end
  local parts = {}
  for _, e in ipairs(log) do
    parts[#parts + 1] = string.format('%.0f', e[1])
    parts[#parts + 1] = string.format('%.0f', e[2])
  end
  redis.call('SET', key, table.concat(parts, ' '), 'PX', math.max(1, math.ceil((log[#log][1] + interval - now) / 1000) + 1))
end

-- Moves a waiting job back into the stream as promote.lua moves a due one: the new entry starts
-- attempt + 1, the same attempt the job was deferred from (a deferral is no attempt). Returns
-- whether the job was still waiting for inst.
local function cv_requeue(stream, jobkey, id, inst, now)
  local h = redis.call('HMGET', jobkey, 'limit_wait', 'type', 'payload', 'metadata', 'attempt',
    'max_retries', 'timeout_ms', 'priority', 'status', 'limit_key')
  if h[9] ~= 'scheduled' or h[1] ~= inst then return false end
  local e = cv_xadd(cv_level_stream(stream, h[8]), id, h[3], h[4], h[2], cv_num(h[5], 0) + 1, h[6], h[7], h[10])
  redis.call('HSET', jobkey, 'status', 'queued', 'entry', e, 'enqueued_at', now)
  redis.call('HDEL', jobkey, 'payload', 'metadata', 'limit_wait')
  redis.call('HINCRBY', jobkey, 'version', 1)
  return true
end

-- Wakes the first job still waiting in inst's wait list (jobs canceled meanwhile are skipped)
-- back into the stream. Returns whether one was woken.
local function cv_wake(lp, inst, stream, jprefix, now)
  local w = lp .. 'w:' .. inst
  local skipped = false
  while true do
    local id = redis.call('LPOP', w)
    if not id then
      -- An instance leaves the set as its list empties (below); only skipped ids can have
      -- emptied it here. The common case, a release with nobody waiting, costs one LPOP.
      if skipped then redis.call('SREM', lp .. 'ws:', inst) end
      return false
    end
    skipped = true
    if cv_requeue(stream, jprefix .. id, id, inst, now) then
      if redis.call('EXISTS', w) == 0 then redis.call('SREM', lp .. 'ws:', inst) end
      return true
    end
  end
end

-- Takes holder's slot names out of inst's slot set, those numbered in nums (a Lua array of
-- strings), or all of them when nums is nil, and wakes one waiting job for each slot freed.
-- Returns how many were freed.
local function cv_give_names(lp, inst, holder, nums, stream, jprefix, now)
  local set = lp .. 'c:' .. inst
  local names = {}
  if nums then
    for k = 1, #nums do names[k] = holder .. '#' .. nums[k] end
  else
    local pat = string.gsub(holder, '[%*%?%[%]\\]', '\\%0') .. '#*'
    local cursor = '0'
    repeat
      local r = redis.call('SSCAN', set, cursor, 'MATCH', pat, 'COUNT', 1000)
      cursor = r[1]
      for _, m in ipairs(r[2]) do names[#names + 1] = m end
    until cursor == '0'
  end
  local freed = 0
  for a = 1, #names, 1000 do
    freed = freed + redis.call('SREM', set, unpack(names, a, math.min(a + 999, #names)))
  end
  if freed > 0 and redis.call('EXISTS', lp .. 'w:' .. inst) == 1 then
    for _ = 1, freed do
      if not cv_wake(lp, inst, stream, jprefix, now) then break end
    end
  end
  return freed
end

-- Gives back every slot of holder h and forgets the instances it had slots of.
local function cv_reap_holder(lp, h, stream, jprefix, now)
  local hs = lp .. 'hs:' .. h
  for _, inst in ipairs(redis.call('SMEMBERS', hs)) do
    cv_give_names(lp, inst, h, nil, stream, jprefix, now)
  end
  redis.call('DEL', hs)
end

-- Gives back every slot of the holders whose lease ran out by now_ms (a worker that died, or
-- lost Redis for longer than its lease), a few holders a call, and wakes the jobs waiting for
-- them. Their jobs come back through recovery.
local function cv_reap_holders(lp, stream, jprefix, now_ms, now)
  local hz = lp .. 'hz:'
  for _, h in ipairs(redis.call('ZRANGEBYSCORE', hz, '-inf', now_ms, 'LIMIT', 0, 8)) do
    cv_reap_holder(lp, h, stream, jprefix, now)
    redis.call('ZREM', hz, h)
  end
end

-- Gives back the concurrency slots a job admitted before leases holds (its 'limit_slots'
-- field: lp, then each instance, '\n'-joined; the slot set's member is the job's id) and wakes
-- one waiting job for each slot freed. Cancel, release and recovery call it, so that the jobs
-- of a worker of an older version leave no slot taken; a job admitted from a lease holds none
-- in its hash (its slots are its worker's), and this costs it one HGET. jprefix is the job key
-- prefix.
local function cv_release_slots(jobkey, id, stream, jprefix, now)
  local held = redis.call('HGET', jobkey, 'limit_slots')
  if not held or held == '' then return end
  local lp = nil
  for inst in string.gmatch(held, '[^\n]+') do
    if not lp then
      lp = inst
    elseif redis.call('SREM', lp .. 'c:' .. inst, id) == 1 then
      cv_wake(lp, inst, stream, jprefix, now)
    end
  end
  redis.call('HDEL', jobkey, 'limit_slots')
end

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

-- Workflows (docs/STATE_MACHINE.md, "Workflows"). A workflow's tasks are jobs of one queue
-- (partition) whose hashes name the workflow's hash ('wf', keys.Queue.Workflow), their name in
-- it ('wf_task'), the tasks they wait for and that wait for them ('wf_deps', 'wf_next': ids,
-- space-separated), and how many of their dependencies are still to complete ('wf_left'). A
-- task with dependencies is published 'waiting'; the script that ends its last dependency puts
-- it into the stream, in the same call. The workflow's hash counts its tasks' outcomes.

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
