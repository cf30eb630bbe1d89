-- entry.lua: a job's stream entry. Its layout (keys.FormatEntryJob), its priority level's
-- stream, and a job put back into the stream. Field names mirror internal/keys.

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

-- Copies payload and metadata from a stream entry's fields into the job hash, for a job that
-- is leaving the stream but keeps its record.
local function cv_keep_payload(jobkey, f)
  if f then
    redis.call('HSET', jobkey, 'payload', f['payload'] or '', 'metadata', f['metadata'] or '')
  end
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
