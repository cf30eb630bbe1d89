-- entry_jobs.lua: read the jobs that stream entries carry, for listing the jobs in progress
-- (the entries come from the group's pending entries list, which names entries, not jobs).
-- KEYS[1] stream
-- ARGV[1] job key prefix, ARGV[2..] entry ids
-- Returns {CV_OK, then one row per entry}. A row is {job id, the attempt the entry starts, the
-- job's hash as a flat field/value list followed by the entry's payload and metadata}, or {}
-- when the entry is gone, names no valid job, or no longer carries its job's live execution
-- (the job's `entry` is another, or the job is neither queued nor in progress).
-- Read-only; the job keys are built from ids found in the entries and share the queue's tag.
local out = {CV_OK}
for a = 2, #ARGV do
  local row = {}
  local f = cv_entry(KEYS[1], ARGV[a])
  local id = f and f['_watermill_message_uuid']
  if f and cv_valid_id(id) then
    local h = redis.call('HGETALL', ARGV[1] .. id)
    local entry, status
    for i = 1, #h, 2 do
      if h[i] == 'entry' then entry = h[i + 1] elseif h[i] == 'status' then status = h[i + 1] end
    end
    if cv_live({entry, status}, ARGV[a]) then
      h[#h + 1] = 'payload'; h[#h + 1] = f['payload'] or ''
      h[#h + 1] = 'metadata'; h[#h + 1] = f['metadata'] or ''
      row = {id, cv_job(f) or 0, h}
    end
  end
  out[#out + 1] = row
end
return out
