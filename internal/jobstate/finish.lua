-- finish.lua: apply a batch of worker transitions to jobs of one queue.
-- KEYS[1] stream, KEYS[2] scheduled set, KEYS[3] dead set, KEYS[4] stats hash, KEYS[5] the
--   queue's watching flag (keys.Queue.Watching), KEYS[5+i] the hash of item i, then the
--   queue's count of unfinished jobs per limit key (keys.Queue.KeyWaiting), the
--   queue's logged flag (keys.Queue.Logged), the queue's workflows flag
--   (keys.Queue.Workflows), the queue's grouped flag
--   (keys.Queue.Grouped), the index of completed jobs (keys.Queue.Completed), last its count
--   (keys.IndexCount)
-- ARGV[1] group, ARGV[2] worker (consumer name), ARGV[3] default retention ms (0 keeps only a
--   tombstone), ARGV[4] wake channel, ARGV[5] the shortest retention (ms) of any finished job,
--   ARGV[6] the events publish command ('SPUBLISH', 'PUBLISH' or '' for none), ARGV[7] the
--   events channel, ARGV[8] the most entries the index of completed jobs keeps
--   (keys.FinishedIndexCap; 0 indexes nothing), ARGV[9] the values per item, 10 or 11,
--   then per item: op, id, entry, attempt, started_at, finished_at, data, extra, sent, payload,
--   and, when ARGV[9] is 11, logs
-- logs is the attempt's log lines as the worker kept them ('<cut>\n<line>\n...'), '' when its
-- handler logged nothing. A call none of whose items logged sends 10 values an item: a value
-- more a job is a Lua string more to make and a bulk string more to parse, for nothing. An
-- applied outcome with lines appends them to the job's logs key
-- (cv_logs_put, keys.Queue.Logs; replacing the item its reports wrote while it ran) and sets
-- the queue's logged flag. In a queue with that flag
-- (one EXISTS a call) a completed job's logs key is expired with its hash, or deleted with it
-- when only a tombstone is kept: an earlier attempt may have logged. A queue whose handlers
-- never log pays no call a job. Dead, retried and snoozed jobs keep their hash, and their
-- logs, without expiry, as before.
-- sent is '1' when the worker sends the job's payload back (a small job with no metadata:
-- that spares an XRANGE of the entry), '' to read payload and metadata from the entry.
-- An outcome gives back no flow-control slot: a job's slots are its worker's lease's, which the
-- worker takes back when the handler returns (admit.lua).
-- ops:
--   start   the attempt began (status in_progress); the entry stays pending
--   done    data = result, extra = the attempt's process span's W3C traceparent ('' when
--           not traced): a workflow's task keeps it for the spans of the tasks it releases
--   retry   data = error, extra = due time (unix ms); dead instead when retries are exhausted
--   dead    data = error; straight to the dead set
--   snooze  data = the most snoozes a job may take, extra = due time (unix ms): scheduled
--           again without counting the attempt ('attempt' back to the executions before it,
--           as a deferral does) or writing an error, 'scheduled_for' = 'snooze', 'snoozes' + 1;
--           dead instead (code CV_DIED) once 'snoozes' passes the bound
--   poison  data = reason; the entry could not be read, and id names the record to keep it
--           under (it may name no job; when it names a job whose entry is another, the record
--           is kept under 'entry-<entry>' instead)
-- Every op but poison is fenced: it applies only while the job's `entry` is the given entry and
-- the job is queued or in_progress; otherwise it is refused and the newer state stays. The
-- given entry is then acknowledged and deleted all the same when it still carries this job (or
-- is gone), because it no longer carries a live job; an entry that carries another job (a
-- stream id handed out again after a failover lost writes) is left alone. A fenced-off start is
-- only ignored (not counted, its entry left alone).
-- A finished job keeps its record for its retention, but never less than ARGV[5]: a publish
-- that go-redis sends again after a lost reply must find the job and make no second one. With
-- no retention, what is kept that long is a tombstone (status and completed_at).
-- The applied outcomes of watched jobs (a waiter marked the hash's 'watched' field) are
-- announced on the events channel, all of the call's in one message (cv_announce): completed,
-- scheduled (a retry) and failed (dead). A poison record is announced (failed) whether watched
-- or not: it is rare and costs no read. An unwatched job's outcome is
-- not: nobody listens for it, and with small chunks (publish and consume at once) a call's
-- SPUBLISH cost 6-8% of throughput (docs/BENCHMARKS.md). A start (in_progress) is never
-- announced: no waiter needs it. The fence's HMGET asks for 'watched' only when the queue's
-- watching flag, set by every marking read, is there (one EXISTS a call): a field the hash
-- lacks costs HMGET a scan of the whole hash, a cost per job in a queue nobody waits on.
-- In a queue that has had workflows (the workflows flag, one EXISTS a call), a job that
-- completes or dies is ended in its workflow first (cv_wf_end: one HMGET a job; for a task,
-- its dependents counted, released into the stream or canceled in this same call, so a
-- task's fan-in is as atomic and fenced as the outcome that triggers it).
-- In a queue that has had jobs of fair groups (the grouped flag, one EXISTS a call), an outcome
-- of a job with a group gives back its place in the group's window and moves the group's next
-- waiting job into the stream (cv_group_out: one HGET a job); other queues read nothing more.
-- In a queue whose count of unfinished jobs per limit key exists (max_waiting_per_key, one
-- EXISTS a call: the hash exists exactly while a counted job lives, lua/keywait.lua), the
-- fence's HMGET asks for the count's mark and the limit key too, and a job that completes or
-- dies (a poison record too) is taken off its key's count; other queues read nothing more.
-- A completed job (unless kept only as a tombstone) is added to the index of completed jobs,
-- all of the call's in one ZADD, scored by when it finished; the index is trimmed to the
-- default retention (by the batch's latest finish) and the cap, a bounded number of entries a
-- call (cv_index). An attempt that ends otherwise (retry, snooze, dead) is appended to the
-- job's attempt history (cv_attempt): one HGET and a longer HSET, off the happy path.
-- Returns {CV_OK, then one code per item: CV_OK applied, CV_REFUSED refused (or a start mark
-- ignored), CV_DIED a retry turned into dead}.
--
-- Cost matters here (this runs for every job): each transition is one HMGET and one HSET (and a
-- PEXPIRE or ZADD), and one XACK and one XDEL for the whole batch. Reading a stream entry back
-- (XRANGE, with its reply) is what the payload argument avoids (docs/BENCHMARKS.md).
local stream, scheduled, dead, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local group, worker, default_ret, wake = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local min_ret, min_ret_s = tonumber(ARGV[5]), ARGV[5]
local ev_cmd, ev_chan = ARGV[6], ARGV[7]
local index_cap = tonumber(ARGV[8])
-- The completed jobs to index, as ZADD's {score, id, ...}, and the batch's latest finish.
local idx, latest = {}, 0
-- The events, when they are published, as pieces ('completed ', attempt, ' ', id, '\n') joined
-- once at the end: a string made per event would be hashed and interned by Lua, a cost per job.
local ev, nev = nil, 0
if ev_cmd ~= '' then ev = {} end
local watching = ev and redis.call('EXISTS', KEYS[5]) == 1
local grouped = redis.call('EXISTS', KEYS[#KEYS - 2]) == 1
local wfq = redis.call('EXISTS', KEYS[#KEYS - 3]) == 1
local logged = redis.call('EXISTS', KEYS[#KEYS - 4]) == 1
local kw = KEYS[#KEYS - 5]
local keyed = redis.call('EXISTS', kw) == 1
-- The events of tasks a workflow canceled (cv_wf_end), announced whether watched or not.
local wfev = {}
local function event(status_sp, attempt, id)
  ev[nev + 1], ev[nev + 2], ev[nev + 3], ev[nev + 4], ev[nev + 5] = status_sp, attempt, ' ', id, '\n'
  nev = nev + 5
end
local drop, out = {}, {CV_OK}
-- Numbers go to redis.call as strings made once per distinct value: Redis formats a Lua number
-- with snprintf, a cost per argument, and every job writes its version.
local vstr = {}
local function str(n)
  local s = vstr[n]
  if not s then s = tostring(n); vstr[n] = s end
  return s
end
local n_done, n_retried, n_failed, n_refused, n_poison = 0, 0, 0, 0, 0
local i = 0
local stride = tonumber(ARGV[9])
for a = 10, #ARGV, stride do
  i = i + 1
  local op, id, entry, attempt = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local started, finished, data, extra = ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], ARGV[a + 7]
  local sent, payload, logs = ARGV[a + 8] == '1', ARGV[a + 9], ''
  if stride == 11 then logs = ARGV[a + 10] end
  local jobkey = KEYS[5 + i]
  local code = CV_REFUSED

  if op == 'poison' then
    local cur = redis.call('HGET', jobkey, 'entry')
    local f = cv_entry(stream, entry)
    if cur == entry then
      cv_keep_payload(jobkey, f)
      if keyed then cv_key_out(kw, jobkey) end
      cv_to_dead(jobkey, dead, id, finished, data)
      if grouped then cv_group_out(jobkey, id, stream, string.sub(jobkey, 1, #jobkey - #id), finished) end
      n_failed = n_failed + 1
      if ev then event('failed ', attempt, id) end
    else
      if redis.call('EXISTS', jobkey) == 1 then
        -- The id names a job that lives on another entry: keep this one beside it.
        id = 'entry-' .. entry
        jobkey = string.sub(jobkey, 1, #jobkey - #ARGV[a + 1]) .. id
      end
      if redis.call('EXISTS', jobkey) == 0 then
        cv_dead_entry(jobkey, dead, id, f, data, finished)
        n_failed = n_failed + 1
        if ev then event('failed ', '0', id) end
      end
    end
    n_poison = n_poison + 1
    drop[#drop + 1] = entry
    code = CV_OK
  elseif op == 'start' or op == 'done' or op == 'retry' or op == 'dead' or op == 'snooze' then
    local h
    -- h[7] 'watched' (when watching or keyed), h[8] 'kc' and h[9] 'limit_key' (when keyed)
    if keyed then
      h = redis.call('HMGET', jobkey, 'entry', 'status', 'max_retries', 'retention_ms',
        'version', 'unique', 'watched', 'kc', 'limit_key')
    elseif watching then
      h = redis.call('HMGET', jobkey, 'entry', 'status', 'max_retries', 'retention_ms',
        'version', 'unique', 'watched')
    else
      h = redis.call('HMGET', jobkey, 'entry', 'status', 'max_retries', 'retention_ms',
        'version', 'unique')
    end
    local watched_f = h[7]
    local live = cv_live(h, entry)
    local version = cv_num(h[5], 0) + 1
    if not live then
      -- A start mark that lands after its job moved on (the outcome was written first: the
      -- worker writes chunks concurrently) changes nothing and is no refusal.
      if op ~= 'start' then
        n_refused = n_refused + 1
        local f = cv_entry(stream, entry)
        if not f or f['_watermill_message_uuid'] == id then drop[#drop + 1] = entry end
      end
    elseif op == 'start' then
      redis.call('HSET', jobkey, 'status', 'in_progress', 'started_at', started,
        'attempt', attempt, 'worker', worker, 'version', str(version))
      code = CV_OK
    else
      local ret = cv_num(h[4], default_ret)
      local ret_s = h[4] or ARGV[3]
      if ret < min_ret then ret_s = min_ret_s end
      local dies = op == 'dead' or (op == 'retry' and tonumber(attempt) > cv_num(h[3], 0))
      if op == 'snooze' then
        local n = redis.call('HINCRBY', jobkey, 'snoozes', 1)
        if n > tonumber(data) then
          dies = true
          data = 'snoozed ' .. n .. ' times, more than the ' .. data .. ' a job may'
        end
      end
      -- The executions the hash records: a snooze does not count the attempt it ends.
      local counted = attempt
      if op == 'snooze' and not dies then counted = tostring(tonumber(attempt) - 1) end
      if grouped then cv_group_out(jobkey, id, stream, string.sub(jobkey, 1, #jobkey - #id), finished) end
      if h[6] and (op == 'done' or dies) and redis.call('GET', h[6]) == id then
        redis.call('DEL', h[6]) -- the job ends: free its unique key
      end
      -- The job ends: off its key's count (lua/keywait.lua).
      if h[8] and h[9] and (op == 'done' or dies) then cv_key_dec(kw, jobkey, h[9]) end
      if wfq and op == 'done' then
        cv_wf_end(jobkey, id, 'C', data, extra, finished, stream, stats, wfev)
      elseif wfq and dies then
        cv_wf_end(jobkey, id, 'F', nil, data, finished, stream, stats, wfev)
      end
      if op == 'done' and ret <= 0 then
        redis.call('DEL', jobkey)
        redis.call('HSET', jobkey, 'status', 'completed', 'completed_at', finished)
        redis.call('PEXPIRE', jobkey, min_ret_s)
      elseif op == 'done' and sent and #payload <= 128 and (data == '' or (#data <= 64 and #payload <= 64)) then
        -- The common case, spelled out: one HSET with its arguments in place (no table to
        -- build and unpack), and no empty fields. A payload of 65 to 128 bytes goes in two
        -- pieces (cv_put_long); a longer one or a result past 64 bytes takes the table, below.
        -- The entry is cleared in the same HSET (empty means none): an HDEL costs a call.
        if data ~= '' then
          redis.call('HSET', jobkey, 'status', 'completed', 'attempt', attempt,
            'started_at', started, 'completed_at', finished, 'worker', worker,
            'version', str(version), 'payload', payload, 'result', data, 'entry', '')
        elseif #payload <= 64 then
          redis.call('HSET', jobkey, 'status', 'completed', 'attempt', attempt,
            'started_at', started, 'completed_at', finished, 'worker', worker,
            'version', str(version), 'payload', payload, 'entry', '')
        else
          redis.call('HSET', jobkey, 'status', 'completed', 'attempt', attempt,
            'started_at', started, 'completed_at', finished, 'worker', worker,
            'version', str(version), 'payload', string.sub(payload, 1, 64),
            'payload+1', string.sub(payload, 65), 'entry', '')
        end
        redis.call('PEXPIRE', jobkey, ret_s)
        if index_cap > 0 then idx[#idx + 1] = finished; idx[#idx + 1] = id end
      else
        local f
        if sent then
          f = {payload = payload, metadata = ''}
        else
          f = cv_entry(stream, entry) or {}
        end
        local fields = {'attempt', counted, 'started_at', started, 'worker', worker,
          'version', str(version)}
        if op == 'done' then
          -- A completed record stays compact (cv_put_long). The other outcomes are rare, and
          -- the scripts that take them further read their fields whole.
          -- Empty fields are left out: a job in the stream has no payload or metadata in
          -- its hash (every move into the stream deletes them), and no result.
          cv_put_long(fields, 'payload', f['payload'] or '')
          if (f['metadata'] or '') ~= '' then cv_put_long(fields, 'metadata', f['metadata']) end
          if data ~= '' then cv_put_long(fields, 'result', data) end
        else
          fields[9], fields[10] = 'payload', f['payload'] or ''
          fields[11], fields[12] = 'metadata', f['metadata'] or ''
        end
        local n = #fields
        if op == 'done' then
          fields[n + 1], fields[n + 2] = 'status', 'completed'
          fields[n + 3], fields[n + 4] = 'completed_at', finished
          fields[n + 5], fields[n + 6] = 'entry', ''
        elseif dies then
          fields[n + 1], fields[n + 2] = 'status', 'failed'
          fields[n + 3], fields[n + 4] = 'last_error', data
          fields[n + 5], fields[n + 6] = 'completed_at', finished
        elseif op == 'snooze' then
          fields[n + 1], fields[n + 2] = 'status', 'scheduled'
          fields[n + 3], fields[n + 4] = 'scheduled_for', 'snooze'
          fields[n + 5], fields[n + 6] = 'run_at', extra
        else
          fields[n + 1], fields[n + 2] = 'status', 'scheduled'
          fields[n + 3], fields[n + 4] = 'last_error', data
          fields[n + 5], fields[n + 6] = 'run_at', extra
          fields[n + 7], fields[n + 8] = 'scheduled_for', 'retry'
        end
        redis.call('HSET', jobkey, unpack(fields))
        if op == 'done' then
          redis.call('PEXPIRE', jobkey, ret_s)
          if index_cap > 0 then idx[#idx + 1] = finished; idx[#idx + 1] = id end
        else
          if dies then
            cv_attempt(jobkey, attempt, worker, started, finished, 'failed', data)
          elseif op == 'snooze' then
            cv_attempt(jobkey, attempt, worker, started, finished, 'snooze', '')
          else
            cv_attempt(jobkey, attempt, worker, started, finished, 'retry', data)
          end
          redis.call('HDEL', jobkey, 'entry')
          if dies then
            redis.call('ZADD', dead, finished, id)
          else
            redis.call('ZADD', scheduled, extra, id)
            cv_wake_if_first(scheduled, wake, id, extra)
          end
        end
      end
      -- A job kept only as a tombstone keeps no lines either.
      if logs ~= '' and not (op == 'done' and ret <= 0) then
        local outcome = op
        if op == 'done' then outcome = 'completed' elseif dies then outcome = 'failed' end
        cv_logs_put(jobkey, id, attempt, outcome, finished, logs)
        if not logged then
          redis.call('SET', KEYS[#KEYS - 4], '1')
          logged = true
        end
      end
      if logged and op == 'done' then
        if ret <= 0 then
          redis.call('DEL', cv_logs_key(jobkey, id))
        else
          redis.call('PEXPIRE', cv_logs_key(jobkey, id), ret_s)
        end
      end
      drop[#drop + 1] = entry
      code = CV_OK
      local watched = watching and watched_f
      if op == 'done' then
        n_done = n_done + 1
        if watched then event('completed ', attempt, id) end
      elseif dies then
        n_failed = n_failed + 1
        if op == 'retry' or op == 'snooze' then code = CV_DIED end
        if watched then event('failed ', attempt, id) end
      elseif op == 'snooze' then
        if watched then event('scheduled ', counted, id) end
      else
        n_retried = n_retried + 1
        if watched then event('scheduled ', attempt, id) end
      end
    end
  else
    return redis.error_reply('finish: unknown op ' .. tostring(op))
  end
  out[i + 1] = code
end
cv_drop(stream, group, drop)
if #idx > 0 then
  for k = 1, #idx, 2 do
    local t = tonumber(idx[k])
    if t > latest then latest = t end
  end
  cv_index(KEYS[#KEYS - 1], KEYS[#KEYS], idx, latest - math.max(default_ret, min_ret), index_cap)
end
if n_done > 0 then redis.call('HINCRBY', stats, 'completed', n_done) end
if n_retried > 0 then redis.call('HINCRBY', stats, 'retried', n_retried) end
if n_failed > 0 then redis.call('HINCRBY', stats, 'failed', n_failed) end
if n_refused > 0 then redis.call('HINCRBY', stats, 'refused', n_refused) end
if n_poison > 0 then redis.call('HINCRBY', stats, 'poison', n_poison) end
if nev > 0 then
  ev[nev] = nil -- the last '\n'
  cv_announce(ev_cmd, ev_chan, {table.concat(ev)})
end
if ev then cv_announce(ev_cmd, ev_chan, wfev) end
return out
