-- recover.lua: put back the jobs of pending entries whose worker stopped renewing its lease.
-- KEYS[1] stream, KEYS[2] dead set, KEYS[3] stats hash, KEYS[4] the queue's recovery lock
-- ARGV[1] group, ARGV[2] lock token, ARGV[3] visibility timeout ms, ARGV[4] job key prefix,
--   ARGV[5] now (unix ms), ARGV[6] the events publish command ('SPUBLISH', 'PUBLISH' or ''),
--   ARGV[7] the events channel, ARGV[8..] entry ids
-- The caller passes only entries whose idle time it trusts (see Trust in the package
-- documentation). The lock is a fence: nothing happens unless it still holds the caller's
-- token, checked in the same atomic step (an empty token skips the check: Config.DisableLock,
-- for tests). Per entry, atomically:
--   - skip it unless it is still pending and idle for at least the visibility timeout (its
--     worker may have renewed the lease since the caller listed it);
--   - acknowledge and delete it when its job finished or moved on to another entry;
--   - otherwise the attempt was lost with its worker and counts: the job goes back into the
--     stream as a new entry (last_error names the lost worker), or to the dead set when it has
--     no retries left, so a job that kills every worker that runs it does not loop forever
--     (a job of a fair group keeps its place in the window when put back, and gives it back,
--     moving the group's next waiting job into the stream, when sent to the dead set);
--   - an entry that cannot be read becomes a dead record, as a worker would have made it;
--   - an entry of another Watermill publisher (a valid id, no 'conveyor' field) that no worker
--     adopted yet is added again unchanged, for the next worker to adopt.
-- A lost attempt is appended to its job's attempt history (cv_attempt: outcome lost, or failed
-- when it was the last), with the lost worker and the attempt's start when the worker's start
-- mark recorded it ('0', unknown, otherwise).
-- A task of a workflow sent to the dead set cancels the tasks waiting for it (cv_wf_end). A job
-- sent to the dead set is taken off its limit key's count (lua/keywait.lua).
-- Each job put back (queued) or sent to the dead set (failed) is announced on the events channel,
-- all of the call's in one message.
-- Returns {CV_OK, requeued, dead, dropped, skipped, poison, traced}, or {CV_LOCK_LOST} when the
-- lock is not held. traced lists, flat, {job id, status ('queued' or 'failed'), traceparent,
-- tracestate} for each job put back or sent to the dead set whose metadata carries a W3C trace
-- context, for the recoverer's spans (empty for jobs without one: no unpacking of theirs).
local stream, dead, stats = KEYS[1], KEYS[2], KEYS[3]
local group, vt, prefix, now = ARGV[1], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
if ARGV[2] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[2] then return {CV_LOCK_LOST} end
local requeued, n_dead, dropped, skipped, poison = 0, 0, 0, 0, 0
local ev_cmd, ev_chan, ev = ARGV[6], ARGV[7], {}
local traced = {}
-- The msgpack of the metadata key traceparent: a fixstr of 11 bytes (0xab), then the name.
local tp_key = '\171traceparent'
local function trace(id, st, f)
  local raw = f['metadata']
  if not raw or not string.find(raw, tp_key, 1, true) then return end
  local ok, md = pcall(cmsgpack.unpack, raw)
  if ok and type(md) == 'table' and md['traceparent'] then
    traced[#traced + 1] = id; traced[#traced + 1] = st
    traced[#traced + 1] = md['traceparent']; traced[#traced + 1] = md.tracestate or ''
  end
end
for a = 8, #ARGV do
  local old = ARGV[a]
  local p = redis.call('XPENDING', stream, group, 'IDLE', vt, old, old, 1)
  if #p == 0 then
    skipped = skipped + 1
  else
    local consumer, idle = p[1][2], p[1][3]
    local f = cv_entry(stream, old)
    if not f then
      -- deleted under the group (by hand: Conveyor deletes and acknowledges together)
      redis.call('XACK', stream, group, old)
      dropped = dropped + 1
    else
      local id = f['_watermill_message_uuid']
      local jobkey = cv_valid_id(id) and (prefix .. id) or nil
      local h = jobkey and redis.call('HMGET', jobkey, 'entry', 'status', 'max_retries', 'attempt',
        'started_at')
      if (not h or not h[2]) and jobkey and not f['conveyor'] then
        -- An entry of another Watermill publisher that its worker lost before adopting it (no
        -- attempt ran): put it back unchanged for the next worker to adopt.
        local fields = {}
        for k, v in pairs(f) do fields[#fields + 1] = k; fields[#fields + 1] = v end
        redis.call('XADD', stream, '*', unpack(fields))
        cv_drop(stream, group, {old})
        requeued = requeued + 1
      elseif not h or not h[2] then
        local rec, reason = id, 'unreadable stream entry ' .. old .. ': no job record for ' .. tostring(id)
        if not cv_valid_id(id) then
          rec = 'entry-' .. old
          reason = 'unreadable stream entry ' .. old .. ': missing or invalid _watermill_message_uuid'
        end
        if redis.call('EXISTS', prefix .. rec) == 0 then
          cv_dead_entry(prefix .. rec, dead, rec, f, reason, now)
          redis.call('HINCRBY', stats, 'failed', 1)
          ev[#ev + 1] = 'failed 0 ' .. rec
        end
        cv_drop(stream, group, {old})
        poison = poison + 1
      elseif not cv_live(h, old) then
        cv_drop(stream, group, {old})
        dropped = dropped + 1
      else
        local n = cv_entry_attempt(f, jobkey)
        -- The lost worker's concurrency slots come back with its job (waking their waiters).
        cv_release_slots(jobkey, id, stream, prefix, now)
        local why = 'attempt ' .. n .. ' lost: worker ' .. consumer ..
          ' stopped renewing its lease (idle ' .. idle .. ' ms)'
        local started = '0'
        if cv_num(h[4], 0) == n and h[5] then started = h[5] end
        if n > cv_num(h[3], 0) then
          cv_keep_payload(jobkey, f)
          redis.call('HSET', jobkey, 'attempt', n)
          cv_attempt(jobkey, n, consumer, started, now, 'failed', why .. '; no retries left')
          cv_wf_end(jobkey, id, 'F', nil, why .. '; no retries left', now, stream, stats, ev)
          local kw = cv_keyed(prefix) -- the job ends: off its limit key's count
          if kw then cv_key_out(kw, jobkey) end
          cv_to_dead(jobkey, dead, id, now, why .. '; no retries left')
          cv_group_out(jobkey, id, stream, prefix, now)
          cv_drop(stream, group, {old})
          n_dead = n_dead + 1
          ev[#ev + 1] = 'failed ' .. n .. ' ' .. id
          trace(id, 'failed', f)
        else
          cv_attempt(jobkey, n, consumer, started, now, 'lost', why)
          cv_replace(stream, group, jobkey, id, old, f, n + 1, n, why, now)
          requeued = requeued + 1
          ev[#ev + 1] = 'queued ' .. n .. ' ' .. id
          trace(id, 'queued', f)
        end
      end
    end
  end
end
if requeued > 0 then redis.call('HINCRBY', stats, 'recovered', requeued) end
if n_dead > 0 then
  redis.call('HINCRBY', stats, 'dead_by_recovery', n_dead)
  redis.call('HINCRBY', stats, 'failed', n_dead)
end
if poison > 0 then redis.call('HINCRBY', stats, 'poison', poison) end
cv_announce(ev_cmd, ev_chan, ev)
return {CV_OK, requeued, n_dead, dropped, skipped, poison, traced}
