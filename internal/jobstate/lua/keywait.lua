-- keywait.lua: the count of a queue's unfinished jobs per limit key, which enqueue.lua checks
-- a publish against (max_waiting_per_key; docs/OPERATIONS.md, "Bounded queues").
-- The count is the hash kw (keys.Queue.KeyWaiting, built here from the job key prefix, in the
-- same tag): field limit key, value the key's counted jobs that have not ended. A counted job
-- carries the mark 'kc' (keys.FieldKeyCounted). Every transition that ends a job (done, dead,
-- canceled, deleted) takes a marked job off its key's count and deletes the mark, so that no
-- job is taken off twice; a field that reaches 0 is deleted, so the hash exists exactly while
-- some counted job lives, and a script that ends jobs looks for marks only when it does (one
-- EXISTS, cv_keyed). Revived jobs (a replay) carry no mark and are not counted.

-- The count's key for job key prefix jprefix ('<base>job:').
local function cv_keywait_key(jprefix)
  return string.sub(jprefix, 1, #jprefix - 4) .. 'keywait'
end

-- The count's key when the queue has one (some counted job lives), else nil.
local function cv_keyed(jprefix)
  local kw = cv_keywait_key(jprefix)
  if redis.call('EXISTS', kw) == 1 then return kw end
  return nil
end

-- Takes a marked job (its limit key lk) off its key's count in kw and deletes its mark.
local function cv_key_dec(kw, jobkey, lk)
  redis.call('HDEL', jobkey, 'kc')
  if redis.call('HINCRBY', kw, lk, -1) <= 0 then redis.call('HDEL', kw, lk) end
end

-- Takes the job of jobkey off its key's count in kw (cv_keyed) when it is marked.
local function cv_key_out(kw, jobkey)
  local h = redis.call('HMGET', jobkey, 'kc', 'limit_key')
  if h[1] and h[2] then cv_key_dec(kw, jobkey, h[2]) end
end
