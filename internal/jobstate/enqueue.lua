-- enqueue.lua: create jobs in one queue, each either queued (stream) or scheduled (sorted set).
-- KEYS[1] stream, KEYS[2] scheduled set, KEYS[3] stats hash, KEYS[4] the index of canceled
--   jobs and KEYS[5] its count (for a job a full queue drops); then, per job, its hash key,
--   followed by its unique key when it has one; last, the closed flag (keys.Closed).
-- ARGV[1] now (unix ms), ARGV[2] wake channel, ARGV[3] the KEYS index of the witness (0 for
--   none), ARGV[4] one character per job, '1' when the job is looked up on its own (its id was
--   chosen by the caller, or the chunk has unique keys), '0' otherwise, ARGV[5] the job key
--   prefix, ARGV[6] the bound on the queue's waiting jobs (max_waiting, per partition; '0':
--   none, and ARGV[7..12] are not read), ARGV[7] the full policy ('reject' or 'drop-oldest'),
--   then what a drop's cancel takes (lua/cancel.lua's cv_cancel): ARGV[8] the consumer group,
--   ARGV[9] default retention ms, ARGV[10] the shortest retention ms, ARGV[11] the events
--   publish command, ARGV[12] the events channel, ARGV[13] the canceled index's bound,
--   ARGV[14] the bound on each limit key's unfinished jobs (max_waiting_per_key, per
--   partition; '0': none, and nothing is counted per key); then 12 values per job:
--   id, type, payload, metadata (msgpack or ''), max_retries, timeout_ms, run_at (unix ms),
--   retention_ms ('' = the queue default), unique_ttl_ms ('' = no unique key), limit_key (''
--   = none: the key per-key limits count the job under, kept in the hash for admit.lua), group
--   ('' = none: a job of a fair group to run at once enters its window or waits,
--   cv_group_enter; it is then 'queued' with no entry and the reply's entry is ''), priority
--   ('' = level 1; '2'..'4': the job's entry goes into its level's stream, cv_level_stream,
--   the level is kept in the hash and added to the queue's set of levels)
-- Returns {CV_WRONG_STATE} when the closed flag is set (the queue's partition count
-- changed: nothing written), else {CV_OK, then two values per job: CV_OK and the new entry id when it was queued, or ''
-- when it was scheduled; CV_FULL and the count of waiting jobs when the queue holds its bound
-- of waiting jobs and the policy rejects (nothing written), or CV_FULL and 'key:' followed by the
-- count of the job's limit key's unfinished jobs when that key holds its bound (nothing
-- written, whatever the policy); CV_EXISTS and '' when the id exists already (nothing written);
-- CV_UNIQUE_HELD and the holder's id when another job holds the unique key (nothing written);
-- CV_CONFLICT and what differs (type, payload) when a chosen id names a job published with
-- another type or payload (nothing written)}.
-- The bound (docs/OPERATIONS.md, "Bounded queues"): the waiting jobs are counted once a call,
-- from what the gauges read (cv_count_waiting: exactly, unless an upper bound shows that the
-- call's jobs all fit), and the count rises with each job the call creates. At the bound,
-- 'reject' refuses the job and counts it (rejected_full); 'drop-oldest' cancels the oldest ready job of the lowest priority level (cv_drop_oldest) and
-- creates the new one, or refuses it when no job is ready to drop.
-- The per-key bound (max_waiting_per_key): a job with a limit key is refused while its key
-- counts that many unfinished jobs (lua/keywait.lua: the count is kept, not recounted; one HGET
-- a keyed job), checked before the queue's bound so that a refused job drops nothing. A
-- created keyed job is marked ('kc') and counted (HINCRBY), so a later job of the call sees it.
-- A flat reply: it costs less to build here and to parse there.
-- Idempotent: a call repeated after a lost reply finds its jobs and changes nothing. A job whose
-- id the caller chose is looked up on its own. Generated ids (random ULIDs) cannot collide, so
-- the only way one exists already is that this very call ran before; and a call is one atomic
-- step (Redis checks memory before a script starts), applied whole or not at all. One lookup
-- of the last job with a generated id (the witness) therefore answers for all of them. Not in a
-- chunk with unique keys: a job refused for its key is never created, so it proves nothing.
--
-- A job queued at once stores no attempt (0), run_at and enqueued_at (both created_at): readers
-- take those defaults, and a queued job's hash stays small.
-- Values handed to redis.call stay strings where they can: Redis formats a Lua number with
-- snprintf("%.17g"), a cost per argument that adds up at one HSET per job (docs/BENCHMARKS.md).

-- Drops the oldest ready job of a full queue: the first undelivered entry of the lowest
-- priority level that has one (level 4 before 1: the levels read last lose first), canceled
-- as cancel.lua cancels, with the reason kept as its last error. Returns whether one was.
local function cv_drop_oldest(stream, sched, stats, index, count, jprefix, now, bound)
  for p = 4, 1, -1 do
    local s = cv_level_stream(stream, p)
    if redis.call('XLEN', s) > 0 then
      local g = cv_stream_group(s, ARGV[8])
      local e = redis.call('XRANGE', s, '(' .. g.last, '+', 'COUNT', 1)[1]
      if e then
        local f = e[2]
        local id = nil
        for i = 1, #f, 2 do
          if f[i] == '_watermill_message_uuid' then id = f[i + 1] end
        end
        if id then
          local r = cv_cancel({stream = stream, sched = sched, stats = stats, job = jprefix .. id, id = id,
            group = ARGV[8], now = now, retention = ARGV[9], minret = ARGV[10], pubcmd = ARGV[11],
            channel = ARGV[12], index = index, count = count, cap = ARGV[13],
            reason = 'dropped: queue full (max_waiting ' .. bound .. ')'})
          return r[1] == CV_OK
        end
        return false
      end
    end
  end
  return false
end

if redis.call('EXISTS', KEYS[#KEYS]) == 1 then return {CV_WRONG_STATE} end
local now, now_s = tonumber(ARGV[1]), ARGV[1]
local witness, chosen = tonumber(ARGV[3]), ARGV[4]
local out, created = {CV_OK}, 0
if witness > 0 and redis.call('EXISTS', KEYS[witness]) == 1 then
  for n = 1, #chosen do out[2 * n], out[2 * n + 1] = CV_EXISTS, '' end
  return out
end
local k = 6
local n = 0
local bound = tonumber(ARGV[6])
local waiting, rejected, dropped = 0, 0, 0
-- Room for every job of the call (an upper bound: a job found existing adds none).
if bound > 0 then waiting = cv_count_waiting(KEYS[1], KEYS[2], KEYS[3], ARGV[5], ARGV[8], bound, (#ARGV - 14) / 12) end
local kbound = tonumber(ARGV[14])
local kw = kbound > 0 and cv_keywait_key(ARGV[5]) or nil
local earliest, earliest_id = nil, nil
local gp = cv_group_prefix(ARGV[5])
for a = 15, #ARGV, 12 do
  n = n + 1
  local id, typ, payload, md = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local mr, tmo, run_at_s = ARGV[a + 4], ARGV[a + 5], ARGV[a + 6]
  local run_at = tonumber(run_at_s)
  local retention, uttl, lkey, grp = ARGV[a + 7], ARGV[a + 8], ARGV[a + 9], ARGV[a + 10]
  local prio = ARGV[a + 11]
  local jobkey = KEYS[k]
  local ukey = nil
  k = k + 1
  if uttl ~= '' then ukey = KEYS[k]; k = k + 1 end

  if string.byte(chosen, n) == 49 and redis.call('EXISTS', jobkey) == 1 then
    local d = cv_differs(jobkey, KEYS[1], typ, payload)
    if d then
      out[#out + 1] = CV_CONFLICT; out[#out + 1] = d
    else
      out[#out + 1] = CV_EXISTS; out[#out + 1] = ''
    end
  else
    local held, full, kfull = nil, false, nil
    if kw and lkey ~= '' then
      local c = tonumber(redis.call('HGET', kw, lkey) or '0')
      if c >= kbound then kfull = c end
    end
    if kfull or (bound > 0 and waiting >= bound) then
      -- A job refused for its unique key says so, full or not: nothing would be written.
      if ukey then held = redis.call('GET', ukey) end
      if held then
      elseif kfull then
        full = true
      elseif ARGV[7] == 'drop-oldest' and cv_drop_oldest(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[5], now_s, bound) then
        dropped = dropped + 1
        waiting = waiting - 1
      else
        full = true
      end
    end
    if full then
      rejected = rejected + 1
      out[#out + 1] = CV_FULL
      if kfull then out[#out + 1] = 'key:' .. kfull else out[#out + 1] = tostring(waiting) end
    elseif not held and ukey and not redis.call('SET', ukey, id, 'NX', 'PX', uttl) then
      held = redis.call('GET', ukey)
    end
    if full then
    elseif held then
      out[#out + 1] = CV_UNIQUE_HELD; out[#out + 1] = held
    else
      local plain = tmo == '0' and retention == '' and not ukey and lkey == '' and grp == '' and prio == ''
      if plain and run_at <= now then
        -- The common case, spelled out: one HSET with its arguments in place.
        local e = cv_xadd(KEYS[1], id, payload, md, typ, '1', mr, tmo)
        redis.call('HSET', jobkey, 'type', typ, 'status', 'queued', 'max_retries', mr,
          'created_at', now_s, 'entry', e, 'version', '1')
        out[#out + 1] = CV_OK; out[#out + 1] = e
      else
        -- One HSET per job all the same: each redis.call costs more than its fields.
        local f = {'type', typ, 'max_retries', mr, 'created_at', now_s, 'version', '1'}
        if tmo ~= '0' then f[#f + 1] = 'timeout_ms'; f[#f + 1] = tmo end
        if retention ~= '' then f[#f + 1] = 'retention_ms'; f[#f + 1] = retention end
        if lkey ~= '' then
          f[#f + 1] = 'limit_key'; f[#f + 1] = lkey
          if kw then
            f[#f + 1] = 'kc'; f[#f + 1] = '1'
            redis.call('HINCRBY', kw, lkey, 1)
          end
        end
        if ukey then
          f[#f + 1] = 'unique'; f[#f + 1] = ukey
          f[#f + 1] = 'unique_ttl_ms'; f[#f + 1] = uttl -- for a replay to take the key again
        end
        if prio ~= '' then
          f[#f + 1] = 'priority'; f[#f + 1] = prio
          cv_add_level(KEYS[1], prio)
        end
        if grp ~= '' then f[#f + 1] = 'group'; f[#f + 1] = grp end
        if run_at <= now and grp ~= '' and not cv_group_enter(gp, grp, id) then
          f[#f + 1] = 'status'; f[#f + 1] = 'queued'
          f[#f + 1] = 'payload'; f[#f + 1] = payload
          f[#f + 1] = 'metadata'; f[#f + 1] = md
          cv_group_wait(gp, grp, id)
          out[#out + 1] = CV_OK; out[#out + 1] = ''
        elseif run_at <= now then
          local e = cv_xadd(cv_level_stream(KEYS[1], prio), id, payload, md, typ, '1', mr, tmo, lkey)
          f[#f + 1] = 'status'; f[#f + 1] = 'queued'
          f[#f + 1] = 'entry'; f[#f + 1] = e
          out[#out + 1] = CV_OK; out[#out + 1] = e
        else
          f[#f + 1] = 'status'; f[#f + 1] = 'scheduled'
          f[#f + 1] = 'run_at'; f[#f + 1] = run_at_s
          f[#f + 1] = 'payload'; f[#f + 1] = payload
          f[#f + 1] = 'metadata'; f[#f + 1] = md
          redis.call('ZADD', KEYS[2], run_at_s, id)
          if earliest == nil or run_at < earliest then earliest, earliest_id = run_at, id end
          out[#out + 1] = CV_OK; out[#out + 1] = ''
        end
        redis.call('HSET', jobkey, unpack(f))
      end
      created = created + 1
      waiting = waiting + 1
    end
  end
end
if created > 0 then redis.call('HINCRBY', KEYS[3], 'enqueued', created) end
if rejected > 0 then redis.call('HINCRBY', KEYS[3], 'rejected_full', rejected) end
if dropped > 0 then redis.call('HINCRBY', KEYS[3], 'dropped_full', dropped) end
if earliest then cv_wake_if_first(KEYS[2], ARGV[2], earliest_id, earliest) end
return out
