-- limits.lua: flow control, its concurrency slots, rates and wait lists.

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

-- Takes job id out of the wait list of instance inst of the queue whose job key prefix is
-- jprefix (a cancel's: a waiting job leaves no id behind, so the lists' lengths are the jobs
-- that wait, ReadStats' LimitWaiting).
local function cv_limit_unwait(jprefix, inst, id)
  local lp = string.sub(jprefix, 1, #jprefix - 4) .. 'limit:'
  local w = lp .. 'w:' .. inst
  if redis.call('LREM', w, 1, id) > 0 and redis.call('EXISTS', w) == 0 then
    redis.call('SREM', lp .. 'ws:', inst)
  end
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
