-- admit.lua: hold a batch of jobs a worker just read to the queue's flow-control limits, before
-- their handlers run: each job is granted (it runs now) or deferred (it waits; no attempt).
-- KEYS[1] stream, KEYS[2] scheduled set, KEYS[3] stats hash, KEYS[4] limits hash
--   (keys.Queue.Limits), KEYS[4+i] the hash of job i
-- ARGV[1] group, ARGV[2] limit prefix (keys.Queue.LimitPrefix), ARGV[3] wake channel,
--   ARGV[4] job key prefix, then 4 values per job: id, entry, type, attempt (the entry's)
-- The limits are the hash's fields (scopes 'q', 'qk', 't:<type>', 'tk:<type>', see
-- internal/jobstate/limits.go) with JSON values {rate, interval_ms, concurrency}. A job is held
-- to every limit whose scope it is in; per-key scopes only when it has a 'limit_key'. The state
-- of each scope instance is described in lib.lua (cv_release_slots).
--
-- Rates are GCRA (the generic cell rate algorithm): one number per scope instance, its
-- theoretical arrival time (TAT), advanced by T = interval / rate for each job granted; a job
-- conforms while TAT - now <= interval - T, so a burst of up to `rate` jobs may start at once
-- after a quiet interval, and in the long run no more than `rate` per interval. Chosen over a
-- token bucket (which allows the same) because it is one value to read and write, with no
-- refill arithmetic, and because it names the exact moment the limit next frees (TAT - interval
-- + T), which is the due time a deferred job needs: it is scheduled for that moment, never
-- polled. Jobs deferred by a rate are spread T apart from the latest due time already handed out
-- (lp..'h:'..inst), so a batch deferred together does not come back together to be deferred
-- again. Times are Redis's (TIME), in microseconds: every worker shares that clock, so none
-- admits early.
--
-- Concurrency: a scope instance's slots are a set of job ids (lp..'c:'..inst). A granted job
-- takes one in each of its concurrency scopes and names them in its hash ('limit_slots'); every
-- way it stops running gives them back (cv_release_slots) and wakes one waiting job per slot.
--
-- Fenced like every transition with an entry in hand (cv_live): a job that moved on is refused,
-- and its entry acknowledged and deleted when it still carries the job or is gone. A job that
-- holds slots already (this call's reply was lost and the worker asked again) is granted as it
-- is. A deferred job is not failed and not an attempt: its entry is acknowledged and deleted, its
-- payload and metadata move into its hash, its `attempt` is the executions started so far (the
-- entry's attempt - 1), and it becomes `scheduled`:
--   - over a rate: in the scheduled set, due when the rate frees (promote.lua starts attempt + 1,
--     the same attempt again);
--   - over a concurrency (and within its rates): out of the scheduled set, in the wait list of
--     the first full instance ('limit_wait' names it), until a slot of that instance is given
--     back. A job deferred while some of its other concurrency instances have room and waiters
--     wakes one of their waiters: the room is not left idle behind it.
-- Returns {CV_OK, then two values per job: CV_OK and '' granted; CV_DEFERRED and the due time
-- (unix ms) deferred by a rate, or '' waiting for a slot; CV_REFUSED and '' refused}.
local stream, scheduled, stats = KEYS[1], KEYS[2], KEYS[3]
local group, lp, wake, jprefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) -- us
local now_ms = math.floor(now / 1000)
local now_ms_s = tostring(now_ms)

-- The limits, by scope field.
local limits, per_key = {}, false
local flat = redis.call('HGETALL', KEYS[4])
for i = 1, #flat, 2 do
  local ok, c = pcall(cjson.decode, flat[i + 1])
  if ok and type(c) == 'table' then
    -- (jobstate.LimitConfig's JSON names, read as fields: rate, interval_ms, concurrency)
    local l = {rate = tonumber(c.rate) or 0, interval = (tonumber(c.interval_ms) or 0) * 1000,
      conc = tonumber(c.concurrency) or 0}
    if l.rate > 0 and l.interval > 0 then l.T = l.interval / l.rate else l.rate = 0 end
    if l.rate > 0 or l.conc > 0 then
      limits[flat[i]] = l
      if flat[i] == 'qk' or string.sub(flat[i], 1, 3) == 'tk:' then per_key = true end
    end
  end
end

-- Per-instance state read once per call and written back at the end.
local tat, horizon, used = {}, {}, {}
local function cached(t, cmd, kind, inst)
  local v = t[inst]
  if v == nil then
    v = tonumber(redis.call(cmd, lp .. kind .. inst)) or 0
    t[inst] = v
  end
  return v
end
local function get_tat(inst) return cached(tat, 'GET', 'r:', inst) end
local function get_used(inst) return cached(used, 'SCARD', 'c:', inst) end
local function get_horizon(inst) return cached(horizon, 'GET', 'h:', inst) end

-- The scopes that apply to a job of type typ and limit key key (or none), as {instance, limit},
-- and the 'limit_slots' value of a grant (nil without a concurrency scope): made once per
-- distinct type and key in a call, not per job.
local scope_cache = {}
local function scopes(typ, key)
  local ck = typ
  if key and key ~= '' then ck = typ .. ' ' .. key else key = nil end -- a type has no space
  local e = scope_cache[ck]
  if e then return e[1], e[2] end
  local sc = {}
  local function add(field, inst)
    local l = limits[field]
    if l then sc[#sc + 1] = {inst, l} end
  end
  add('q', 'q')
  add('t:' .. typ, 't:' .. typ)
  if key then
    add('qk', 'qk:' .. key)
    add('tk:' .. typ, 'tk:' .. typ .. ' ' .. key)
  end
  local held = nil
  for _, s in ipairs(sc) do
    if s[2].conc > 0 then
      if held then held = held .. '\n' .. s[1] else held = lp .. '\n' .. s[1] end
    end
  end
  scope_cache[ck] = {sc, held}
  return sc, held
end

-- The ids each concurrency instance gains, added with one SADD per instance at the end: the
-- counts (used) are kept here meanwhile, and nothing in this call reads the sets' members.
local adds = {}
local out, drop = {CV_OK}, {}
local n_deferred, n_refused = 0, 0
local i = 0
for a = 5, #ARGV, 4 do
  i = i + 1
  local id, entry, typ, attempt = ARGV[a], ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3])
  local jobkey = KEYS[4 + i]
  local h
  if per_key then
    h = redis.call('HMGET', jobkey, 'entry', 'status', 'limit_slots', 'limit_key')
  else
    h = redis.call('HMGET', jobkey, 'entry', 'status', 'limit_slots')
  end
  if not cv_live(h, entry) then
    n_refused = n_refused + 1
    local f = cv_entry(stream, entry)
    if not f or f['_watermill_message_uuid'] == id then drop[#drop + 1] = entry end
    out[#out + 1] = CV_REFUSED; out[#out + 1] = ''
  elseif h[3] and h[3] ~= '' then
    out[#out + 1] = CV_OK; out[#out + 1] = '' -- granted before: the reply was lost
  else
    local sc, held = scopes(typ, h[4])
    local due, full = nil, nil -- the latest rate due time (us); the first full instance
    for _, s in ipairs(sc) do
      local inst, l = s[1], s[2]
      if l.rate > 0 then
        local v = get_tat(inst)
        if v - now > l.interval - l.T then
          local d = math.max(v - l.interval + l.T, get_horizon(inst) + l.T)
          if not due or d > due then due = d end
        end
      end
      if l.conc > 0 and not full and get_used(inst) >= l.conc then full = inst end
    end
    if not due and not full then
      for _, s in ipairs(sc) do
        local inst, l = s[1], s[2]
        if l.rate > 0 then tat[inst] = math.max(get_tat(inst), now) + l.T end
        if l.conc > 0 then
          local ad = adds[inst]
          if not ad then ad = {}; adds[inst] = ad end
          ad[#ad + 1] = id
          used[inst] = get_used(inst) + 1
        end
      end
      if held then
        redis.call('HSET', jobkey, 'limit_slots', held, 'admitted_at', now_ms_s)
      elseif #sc > 0 then
        redis.call('HSET', jobkey, 'admitted_at', now_ms_s)
      end
      out[#out + 1] = CV_OK; out[#out + 1] = ''
    else
      -- Deferred: the job leaves the stream with its payload, and the attempt is not counted.
      local f = cv_entry(stream, entry)
      cv_keep_payload(jobkey, f)
      redis.call('HSET', jobkey, 'status', 'scheduled', 'attempt', tostring(attempt - 1))
      redis.call('HDEL', jobkey, 'entry')
      redis.call('HINCRBY', jobkey, 'version', 1)
      drop[#drop + 1] = entry
      if due then
        local due_ms = math.ceil(due / 1000)
        for _, s in ipairs(sc) do
          local inst, l = s[1], s[2]
          if l.rate > 0 and get_tat(inst) - now > l.interval - l.T then
            -- The exact due time, not due_ms: rounded up, each deferred job would push the next
            -- a whole millisecond on, capping the rate at 1,000/s per scope.
            horizon[inst] = math.max(horizon[inst] or 0, due)
          end
        end
        redis.call('HSET', jobkey, 'run_at', tostring(due_ms))
        redis.call('ZADD', scheduled, due_ms, id)
        cv_wake_if_first(scheduled, wake, id, due_ms)
        out[#out + 1] = CV_DEFERRED; out[#out + 1] = tostring(due_ms)
      else
        redis.call('HSET', jobkey, 'limit_wait', full)
        redis.call('RPUSH', lp .. 'w:' .. full, id)
        redis.call('SADD', lp .. 'ws:', full)
        out[#out + 1] = CV_DEFERRED; out[#out + 1] = ''
      end
      -- Pass on the room this job leaves in its other concurrency instances.
      for _, s in ipairs(sc) do
        local inst, l = s[1], s[2]
        if l.conc > 0 and inst ~= full and get_used(inst) < l.conc and
            redis.call('LLEN', lp .. 'w:' .. inst) > 0 then
          cv_wake(lp, inst, stream, jprefix, now_ms_s)
        end
      end
      n_deferred = n_deferred + 1
    end
  end
end
for inst, ad in pairs(adds) do redis.call('SADD', lp .. 'c:' .. inst, unpack(ad)) end
cv_drop(stream, group, drop)
-- The rate state, kept until it no longer matters (once now passes it, now is used instead).
for inst, v in pairs(tat) do
  if v > now then
    redis.call('SET', lp .. 'r:' .. inst, string.format('%.0f', math.ceil(v)), 'PX',
      math.ceil((v - now) / 1000) + 1)
  end
end
for inst, v in pairs(horizon) do
  if v > now then
    redis.call('SET', lp .. 'h:' .. inst, string.format('%.0f', v), 'PX', math.ceil((v - now) / 1000) + 1)
  end
end
if n_deferred > 0 then redis.call('HINCRBY', stats, 'limited', n_deferred) end
if n_refused > 0 then redis.call('HINCRBY', stats, 'refused', n_refused) end
return out
