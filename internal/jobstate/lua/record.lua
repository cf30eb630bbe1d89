-- record.lua: a job's hash beyond its status. What a publish would change, its unique key, its
-- attempt history, and the queue's indexes of finished jobs.

-- A completed job keeps its payload (and metadata) in pieces of at most 64 bytes:
-- 'payload', then 'payload+1', 'payload+2'... Redis keeps a hash whose values are all that short
-- as one listpack (hash-max-listpack-value, 64 by default). One longer value turns the hash into
-- a table of separately allocated fields: 851 bytes a completed job with a 100-byte payload,
-- against 300 in pieces, and an allocation per field to write and to free (docs/BENCHMARKS.md,
-- "A job's cost in Redis memory"). Past 96 pieces the value is written whole: the hash
-- would pass hash-max-listpack-entries anyway. Readers join the pieces (cv_read_long, and
-- jobstate.DecodeRecord for a hash read whole). The numbers are keys.RecordPiece and
-- keys.RecordMaxPieces (a test keeps them equal): a script gets functions, not constants.

-- Appends name and value to the HSET arguments f, in pieces when that keeps the hash compact.
local function cv_put_long(f, name, value)
  local CV_PIECE, CV_MAX_PIECES = 64, 96
  local n = #value
  if n <= CV_PIECE or n > CV_PIECE * CV_MAX_PIECES then
    f[#f + 1] = name; f[#f + 1] = value
    return
  end
  f[#f + 1] = name; f[#f + 1] = string.sub(value, 1, CV_PIECE)
  local k = 1
  for at = CV_PIECE + 1, n, CV_PIECE do
    f[#f + 1] = name .. '+' .. k; f[#f + 1] = string.sub(value, at, at + CV_PIECE - 1)
    k = k + 1
  end
end

-- The whole value of field name of jobkey, given its first piece (the field's own value, read
-- by the caller): a value of exactly 64 bytes may go on in 'name+1' and after.
local function cv_read_long(jobkey, name, first)
  if not first or #first ~= 64 then return first end
  local parts, k = {first}, 1
  while true do
    local v = redis.call('HGET', jobkey, name .. '+' .. k)
    if not v then break end
    parts[#parts + 1] = v
    k = k + 1
  end
  return table.concat(parts)
end

-- What differs between the job at jobkey and a publish of typ and payload under its id: nil
-- when nothing does (or when the record keeps too little to tell: a tombstone), else the names
-- of what differs, comma-joined. Metadata is not compared: its encoding has no fixed order.
local function cv_differs(jobkey, stream, typ, payload)
  local h = redis.call('HMGET', jobkey, 'type', 'payload', 'entry')
  if not h[1] then return nil end
  local p = cv_read_long(jobkey, 'payload', h[2])
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

-- Frees the job's unique key when the job still holds it.
local function cv_release_unique(jobkey, id)
  local u = redis.call('HGET', jobkey, 'unique')
  if u and redis.call('GET', u) == id then redis.call('DEL', u) end
end

-- A job id as the client accepts it (internal/keys.ValidateID).
local function cv_valid_id(id)
  return id ~= nil and id ~= false and #id > 0 and #id <= 128 and
    string.match(id, '^[%w%._:%-]+$') ~= nil
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

-- The key of job id's logs (keys.Queue.Logs) from the key of its hash: <base>job:<id> and
-- <base>logs:<id> (keys.LogsInfix), one slot. Scripts that delete or expire a hash do the same
-- to it; on a key that is not there that costs a lookup.
local function cv_logs_key(jobkey, id)
  return string.sub(jobkey, 1, #jobkey - #id - 4) .. 'logs:' .. id
end

-- Writes an attempt's log lines (logs: '<cut>\n<line>\n<line>...', as the worker sends them)
-- to the job's logs key as one item, '<attempt> <outcome> <ended ms> <cut>\n<lines>', keeping
-- the last 20 items (keys.MaxAttemptHistory, as cv_attempt). The item replaces the last one
-- when that is the same attempt's, written while it ran (outcome 'running', by progress.lua
-- with a report): the outcome's lines include those. It sets no expiry: the caller gives the
-- key its hash's.
local function cv_logs_put(jobkey, id, attempt, outcome, ended, logs)
  local lk = cv_logs_key(jobkey, id)
  local item = attempt .. ' ' .. outcome .. ' ' .. ended .. ' ' .. logs
  local last = redis.call('LINDEX', lk, -1)
  local mark = attempt .. ' running '
  if last and string.sub(last, 1, #mark) == mark then
    redis.call('LSET', lk, -1, item)
  elseif redis.call('RPUSH', lk, item) > 20 then
    redis.call('LTRIM', lk, -20, -1)
  end
end
