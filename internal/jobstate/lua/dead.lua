-- dead.lua: the move to the dead set, of a job or of a stream entry that cannot run.

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
