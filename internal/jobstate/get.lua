-- get.lua: read a job's record, with its payload and metadata from wherever they live now.
-- KEYS[1] job hash, KEYS[2] stream (level 1: the entry of a job of a higher level is in its
--   level's stream, cv_level_stream of its 'priority' field); ARGV[1] '1' to mark the job watched (a waiter's read: the
--   job's outcome is announced from then on, see finish.lua), else absent; with it, KEYS[3]
--   the queue's watching flag (keys.Queue.Watching), set with the mark
-- Returns {CV_OK, the hash as a flat field/value list}, or {CV_NOT_FOUND}; while the job is in
-- the stream, payload and metadata are read from its entry and appended.
local h = redis.call('HGETALL', KEYS[1])
if #h == 0 then return {CV_NOT_FOUND} end
local entry, has_payload, status, watched, prio = nil, false, false, false, nil
for i = 1, #h, 2 do
  if h[i] == 'entry' and h[i + 1] ~= '' then entry = h[i + 1] end
  if h[i] == 'payload' then has_payload = true end
  if h[i] == 'status' then status = true end
  if h[i] == 'watched' then watched = true end
  if h[i] == 'priority' then prio = h[i + 1] end
end
-- Marked in the read itself: a finish either ran before it (the read shows the outcome) or runs
-- after it and sees the mark, and the queue's flag that makes finish.lua look for marks (set
-- even when the job was marked already: a mark may predate the flag). Only a hash with a
-- status is a job (HSET would make one).
if ARGV[1] == '1' and status then
  if not watched then redis.call('HSET', KEYS[1], 'watched', '1') end
  redis.call('SET', KEYS[3], '1')
end
if entry and not has_payload then
  local f = cv_entry(cv_level_stream(KEYS[2], prio), entry)
  if f then
    h[#h + 1] = 'payload'; h[#h + 1] = f['payload'] or ''
    h[#h + 1] = 'metadata'; h[#h + 1] = f['metadata'] or ''
  end
end
table.insert(h, 1, CV_OK)
return h
