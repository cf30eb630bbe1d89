-- admit.lua: lease a worker more of its queue's flow-control limits, and hold the jobs it could
-- not admit from its leases alone to the limits: each is granted (it runs now, on the worker's
-- leases) or deferred (it waits; no attempt).
-- KEYS[1] stream, KEYS[2] scheduled set, KEYS[3] stats hash, KEYS[4] limits hash
--   (keys.Queue.Limits), KEYS[4+i] the hash of job i
-- ARGV[1] group, ARGV[2] limit prefix lp (keys.Queue.LimitPrefix), ARGV[3] wake channel,
--   ARGV[4] job key prefix, ARGV[5] holder (the worker session's lease name), ARGV[6] the
--   holder's lease (ms), ARGV[7] '1' when the holder had a lease already (a call of it went
--   through before), ARGV[8] the number of instance requests, ARGV[9] how long the holder may
--   keep a rate token before it starts a job on it or gives it back (us), then 5 values per
--   request:
--   instance, the slot numbers asked for (','-joined, '' for none), the slots the worker sets
--   aside for this call's jobs, the rate tokens asked for, the tokens set aside;
--   then 6 values per job: id, entry, type, attempt (the entry's), limit key ('' for none),
--   fence ('1': check that the job is still live before granting it)
-- Returns {CV_OK, lost, stamp (the time, unix us, the tokens granted and left to the holder are
-- logged at: they are given back by it, leases.lua), then 3 values per request: how many of the slot numbers asked for were
-- granted (the first ones), tokens granted, 1 when jobs wait for a slot of the instance (else
-- 0: the worker then takes no more slots of it without asking, and gives back its spare ones); then 2 values per job: CV_OK and '' granted;
-- CV_DEFERRED and the due time (unix ms) deferred by a rate, or '' waiting for a slot;
-- CV_REFUSED and '' refused (the job moved on)}. lost is 1 when the holder had a lease that
-- ran out (leases.lua says the same): the worker forgets the slots and tokens it held before.
--
-- Leases (docs/STATE_MACHINE.md, "Flow control"). A worker admits the jobs it reads from what
-- it holds: concurrency slots and rate tokens leased from Redis in blocks, given back in bulk
-- (leases.lua), so a limit that is not limiting costs no call per job or per read. Only what
-- its leases cannot cover comes here.
--
-- Concurrency: a scope instance's slots are a set (lp..'c:'..inst) of slot names, each a
-- holder's ('<holder>#<n>'), so its size is the slots taken. Asking for numbers by name makes
-- a grant idempotent: a call repeated after a lost reply adds nothing twice. A holder's
-- lease lives in lp..'hz:' (holder -> when it runs out, unix ms, renewed by every call of the
-- holder) and lp..'hs:'..holder (the instances it has slots in), so that when a worker dies
-- its slots come back once its lease runs out (cv_reap_holders), as its jobs do through
-- recovery. Room left while jobs wait for a slot wakes them (the jobs in hand go first).
--
-- Rates: at most `rate` jobs start in any window of the interval, by the log of the grants of
-- the last interval (lua/limits.lua, cv_rate_read): a burst of up to `rate` at once after a quiet
-- interval, then the next once the first of them is an interval old. A token a job of this
-- call takes is logged now, the job starting as the reply arrives; one left to the holder (it
-- leases ahead of the jobs it reads) is logged at now + the token's life (ARGV[9]), the latest
-- its job may start, so that the bound holds for starts, not grants. Under a rate that is
-- reached every token goes to a job in hand, so the margin costs no throughput. The log names the exact
-- moment the limit next frees, which is the due time a deferred job needs: it is scheduled for
-- that moment, never polled. A token a worker does not use soon is given back (leases.lua takes
-- it out of the log by the stamp of its grant), and one whose grant's reply was lost is never
-- used, which can only slow the rate. Jobs deferred by a rate are spread T = interval / rate
-- apart from the latest due time already handed out (lp..'h:'..inst), so a batch deferred
-- together does not come back together to be deferred again. Times are Redis's (TIME), in
-- microseconds: every worker shares that clock.
--
-- A job is granted when the slots and tokens set aside and granted by this call cover every
-- one of its limits (in the order given). A granted job's hash is not touched: its slots are
-- its worker's until its handler returns. A job with the fence flag (asked again after a lost
-- reply) is granted only while still live (cv_live). A deferred job is fenced, then not failed
-- and not an attempt: its entry is acknowledged and deleted, its payload and metadata move into
-- its hash, its `attempt` is the executions started so far (the entry's attempt - 1), and it
-- becomes `scheduled`:
--   - over a rate: in the scheduled set, due when the rate frees (promote.lua starts attempt + 1,
--     the same attempt again), 'rate_wait' naming the due time and the rate's instance;
--   - over a concurrency whose slots are all taken: out of the scheduled set, in the wait list
--     of that instance ('limit_wait' names it), until a slot of it is given back;
--   - under a limit the worker did not ask for (its copy of the limits is older than this one):
--     due now, so that it is read and admitted again at once.
local stream, scheduled, stats = KEYS[1], KEYS[2], KEYS[3]
local group, lp, wake, jprefix, holder = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local lease_ms, known, nreq = tonumber(ARGV[6]), ARGV[7] == '1', tonumber(ARGV[8])
local token_life = tonumber(ARGV[9])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) -- us
local now_ms = math.floor(now / 1000)
local now_ms_s = tostring(now_ms)

local limits = cv_read_limits(KEYS[4])
local score = tonumber(redis.call('ZSCORE', lp .. 'hz:', holder))
local lost = 0
if known and (not score or score < now_ms) then
  lost = 1
  if score then cv_reap_holder(lp, holder, stream, jprefix, now_ms_s) end
end
redis.call('ZADD', lp .. 'hz:', now_ms + lease_ms, holder)

-- Per-instance state read once per call and written back at the end.
local logs, horizon = {}, {}
local function get_log(inst, l)
  local v = logs[inst]
  if v == nil then
    v = cv_rate_read(lp .. 'rl:' .. inst, now, l.interval)
    logs[inst] = {log = v, interval = l.interval}
    return v
  end
  return v.log
end
local function get_horizon(inst)
  local v = horizon[inst]
  if v == nil then
    v = tonumber(redis.call('GET', lp .. 'h:' .. inst)) or 0
    horizon[inst] = v
  end
  return v
end

local reaped = false
local out = {CV_OK, lost, string.format('%.0f', now + token_life)}
local asked = {} -- the requests' instances, in order
-- What each instance can give this call's jobs: {c = slots, r = tokens}.
local cap = {}
local a = 10
for _ = 1, nreq do
  local inst, names, cfree = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  local ask, rfree = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  a = a + 5
  if lost == 1 then cfree, rfree = 0, 0 end -- what the worker set aside is gone with its lease
  local l = limits[cv_limit_field(inst)]
  local gn, gt = 0, 0
  if names ~= '' and l and l.conc > 0 then
    local set, wl = lp .. 'c:' .. inst, lp .. 'w:' .. inst
    local room = l.conc - redis.call('SCARD', set)
    local nums = {}
    for n in string.gmatch(names, '[^,]+') do nums[#nums + 1] = n end
    if room < #nums and not reaped then
      reaped = true
      cv_reap_holders(lp, stream, jprefix, now_ms, now_ms_s)
      room = l.conc - redis.call('SCARD', set)
    end
    gn = math.max(0, math.min(room, #nums))
    if gn > 0 then
      local m = {}
      for k = 1, gn do m[k] = holder .. '#' .. nums[k] end
      redis.call('SADD', set, unpack(m))
      redis.call('SADD', lp .. 'hs:' .. holder, inst)
    end
    if redis.call('EXISTS', wl) == 1 then
      -- Room left while jobs wait (slots given back by a holder's death, or a raised limit):
      -- they go back into the stream for it. The jobs in hand, read and live, go first.
      room = room - gn
      while room > 0 and cv_wake(lp, inst, stream, jprefix, now_ms_s) do room = room - 1 end
    end
  end
  if ask > 0 and l and l.rate > 0 then
    local log = get_log(inst, l)
    gt = math.max(0, math.min(ask, l.rate - cv_rate_count(log)))
    if gt > 0 then cv_rate_add(log, now + token_life, gt) end
  end
  cap[inst] = {c = cfree + gn, r = rfree + gt, granted = gt}
  out[#out + 1] = gn; out[#out + 1] = gt; out[#out + 1] = 0 -- waiting: set at the end
  asked[#asked + 1] = inst
end

local scope_cache = {}
local drop = {}
local n_deferred, n_refused = 0, 0
local i = 0
for b = a, #ARGV, 6 do
  i = i + 1
  local id, entry, typ, attempt = ARGV[b], ARGV[b + 1], ARGV[b + 2], tonumber(ARGV[b + 3])
  local key, fence = ARGV[b + 4], ARGV[b + 5] == '1'
  local jobkey = KEYS[4 + i]
  local sc = cv_limit_scopes(limits, typ, key, scope_cache)
  local short = false
  for _, s in ipairs(sc) do
    local c, l = cap[s[1]], s[2]
    if not c or (l.conc > 0 and c.c < 1) or (l.rate > 0 and c.r < 1) then short = true; break end
  end
  local h
  if fence or short then h = redis.call('HMGET', jobkey, 'entry', 'status') end
  if h and not cv_live(h, entry) then
    n_refused = n_refused + 1
    local f = cv_entry(stream, entry)
    if not f or f['_watermill_message_uuid'] == id then drop[#drop + 1] = entry end
    out[#out + 1] = CV_REFUSED; out[#out + 1] = ''
  elseif not short then
    for _, s in ipairs(sc) do
      local c, l = cap[s[1]], s[2]
      if l.conc > 0 then c.c = c.c - 1 end
      if l.rate > 0 then c.r = c.r - 1 end
    end
    out[#out + 1] = CV_OK; out[#out + 1] = ''
  else
    -- The latest rate due time (us), the first instance whose slots are all taken, and
    -- whether a limit was not asked for.
    local due, full, unasked, rate_inst = nil, nil, false, nil
    for _, s in ipairs(sc) do
      local inst, l = s[1], s[2]
      local c = cap[inst]
      if not c then
        unasked = true
      else
        if l.rate > 0 and c.r < 1 then
          local d = math.max(cv_rate_due(get_log(inst, l), l.rate, l.interval) or now,
            get_horizon(inst) + l.T, now)
          if not due or d > due then due, rate_inst = d, inst end
        end
        if l.conc > 0 and c.c < 1 and not full and
            redis.call('SCARD', lp .. 'c:' .. inst) >= l.conc then
          full = inst
        end
      end
    end
    if not due and not full then due = now end -- a limit not asked for, or not enough asked
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
        local c = cap[inst]
        if l.rate > 0 and c and c.r < 1 then
          -- The exact due time, not due_ms: rounded up, each deferred job would push the next
          -- a whole millisecond on, capping the rate at 1,000/s per scope.
          horizon[inst] = math.max(horizon[inst] or 0, due)
        end
      end
      if rate_inst then
        -- The rate's mark, in the HSET that sets the due time: a reader takes it as the job's
        -- reason only while the job is due at that time (keys.FieldRateWait).
        redis.call('HSET', jobkey, 'run_at', tostring(due_ms), 'rate_wait', tostring(due_ms) .. ' ' .. rate_inst)
      else
        redis.call('HSET', jobkey, 'run_at', tostring(due_ms))
      end
      redis.call('ZADD', scheduled, due_ms, id)
      cv_wake_if_first(scheduled, wake, id, due_ms)
      out[#out + 1] = CV_DEFERRED; out[#out + 1] = tostring(due_ms)
    else
      redis.call('HSET', jobkey, 'limit_wait', full)
      redis.call('RPUSH', lp .. 'w:' .. full, id)
      redis.call('SADD', lp .. 'ws:', full)
      out[#out + 1] = CV_DEFERRED; out[#out + 1] = ''
    end
    n_deferred = n_deferred + 1
  end
end
cv_drop(stream, group, drop)
-- The tokens of this call that its jobs took (the ones set aside first) started now: logged
-- now, not at now + the token's life.
for inst, c in pairs(cap) do
  local taken = c.granted - c.r
  if taken > 0 and logs[inst] then
    local log = logs[inst].log
    cv_rate_give(log, now + token_life, taken)
    cv_rate_add(log, now, taken)
  end
end
-- Whether jobs wait for a slot of each instance asked about, this call's deferrals included.
for k, inst in ipairs(asked) do
  out[3 + 3 * k] = redis.call('EXISTS', lp .. 'w:' .. inst)
end
-- The rate logs, kept until their newest grant is an interval old; the horizons until now
-- passes them (now is used instead).
for inst, v in pairs(logs) do
  cv_rate_save(lp .. 'rl:' .. inst, v.log, now, v.interval)
end
for inst, v in pairs(horizon) do
  if v > now then
    redis.call('SET', lp .. 'h:' .. inst, string.format('%.0f', v), 'PX', math.ceil((v - now) / 1000) + 1)
  end
end
if n_deferred > 0 then redis.call('HINCRBY', stats, 'limited', n_deferred) end
if n_refused > 0 then redis.call('HINCRBY', stats, 'refused', n_refused) end
return out
