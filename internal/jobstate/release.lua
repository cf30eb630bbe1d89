-- release.lua: a worker that is shutting down puts back the jobs it still holds, so another
-- worker starts them at once instead of after the visibility timeout.
-- KEYS[1] stream, KEYS[2] stats hash
-- ARGV[1] group, ARGV[2] job key prefix, ARGV[3] now (unix ms), ARGV[4..] entry ids
-- Fenced like every worker transition: a job is put back only while its `entry` is the given
-- entry and it is queued or in_progress. The interrupted attempt does not count: the new entry
-- starts the same attempt number again. An entry that carries no live job is acknowledged and
-- deleted; one that cannot be read is left pending for recovery to dead-letter. A job put back
-- gives back the concurrency slots it held (cv_release_slots): admission takes them again.
-- Returns {CV_OK, released, dropped}.
local stream, group, prefix, now = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local released, dropped = 0, 0
for a = 4, #ARGV do
  local old = ARGV[a]
  local f = cv_entry(stream, old)
  local id = f and f['_watermill_message_uuid']
  if f and cv_valid_id(id) then
    local jobkey = prefix .. id
    local h = redis.call('HMGET', jobkey, 'entry', 'status')
    if cv_live(h, old) then
      local n = cv_entry_attempt(f, jobkey)
      cv_release_slots(jobkey, id, stream, prefix, now)
      cv_replace(stream, group, jobkey, id, old, f, n, n - 1, nil, now)
      released = released + 1
    elseif redis.call('EXISTS', jobkey) == 1 then
      cv_drop(stream, group, {old})
      dropped = dropped + 1
    end
  elseif not f then
    -- deleted under the group: nothing to put back, only the pending entry to clear
    redis.call('XACK', stream, group, old)
    dropped = dropped + 1
  end
end
if released > 0 then redis.call('HINCRBY', KEYS[2], 'released', released) end
return {CV_OK, released, dropped}
