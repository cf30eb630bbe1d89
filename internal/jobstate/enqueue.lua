-- enqueue.lua: create jobs in one queue, each either queued (stream) or scheduled (sorted set).
-- KEYS[1] stream, KEYS[2] scheduled set, KEYS[3] stats hash; then, per job, its hash key,
--   followed by its unique key when it has one; last, the closed flag (keys.Closed).
-- ARGV[1] now (unix ms), ARGV[2] wake channel, ARGV[3] the KEYS index of the witness (0 for
--   none), ARGV[4] one character per job, '1' when the job is looked up on its own (its id was
--   chosen by the caller, or the chunk has unique keys), '0' otherwise, ARGV[5] the job key
--   prefix, then 12 values per job:
--   id, type, payload, metadata (msgpack or ''), max_retries, timeout_ms, run_at (unix ms),
--   retention_ms ('' = the queue default), unique_ttl_ms ('' = no unique key), limit_key (''
--   = none: the key per-key limits count the job under, kept in the hash for admit.lua), group
--   ('' = none: a job of a fair group to run at once enters its window or waits,
--   cv_group_enter; it is then 'queued' with no entry and the reply's entry is ''), priority
--   ('' = level 1; '2'..'4': the job's entry goes into its level's stream, cv_level_stream,
--   the level is kept in the hash and added to the queue's set of levels)
-- Returns {CV_WRONG_STATE} when the closed flag is set (the queue's partition count
-- changed: nothing written), else {CV_OK, then two values per job: CV_OK and the new entry id when it was queued, or ''
-- when it was scheduled; CV_EXISTS and '' when the id exists already (nothing written);
-- CV_UNIQUE_HELD and the holder's id when another job holds the unique key (nothing written);
-- CV_CONFLICT and what differs (type, payload) when a chosen id names a job published with
-- another type or payload (nothing written)}.
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
if redis.call('EXISTS', KEYS[#KEYS]) == 1 then return {CV_WRONG_STATE} end
local now, now_s = tonumber(ARGV[1]), ARGV[1]
local witness, chosen = tonumber(ARGV[3]), ARGV[4]
local out, created = {CV_OK}, 0
if witness > 0 and redis.call('EXISTS', KEYS[witness]) == 1 then
  for n = 1, #chosen do out[2 * n], out[2 * n + 1] = CV_EXISTS, '' end
  return out
end
local k = 4
local n = 0
local earliest, earliest_id = nil, nil
local gp = cv_group_prefix(ARGV[5])
for a = 6, #ARGV, 12 do
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
    local held = nil
    if ukey and not redis.call('SET', ukey, id, 'NX', 'PX', uttl) then
      held = redis.call('GET', ukey)
    end
    if held then
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
        if lkey ~= '' then f[#f + 1] = 'limit_key'; f[#f + 1] = lkey end
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
    end
  end
end
if created > 0 then redis.call('HINCRBY', KEYS[3], 'enqueued', created) end
if earliest then cv_wake_if_first(KEYS[2], ARGV[2], earliest_id, earliest) end
return out
