-- record.lua: a job's hash beyond its status. What a publish would change, its unique key, its
-- attempt history, and the queue's indexes of finished jobs.

-- What differs between the job at jobkey and a publish of typ and payload under its id: nil
-- when nothing does (or when the record keeps too little to tell: a tombstone), else the names
-- of what differs, comma-joined. Metadata is not compared: its encoding has no fixed order.
local function cv_differs(jobkey, stream, typ, payload)
  local h = redis.call('HMGET', jobkey, 'type', 'payload', 'entry')
  if not h[1] then return nil end
  local p = h[2]
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
