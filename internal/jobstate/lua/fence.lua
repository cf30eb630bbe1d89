-- fence.lua: the fence of every transition asked for with a stream entry in hand.

-- Reports whether a job is live on entry: `h` is HMGET(jobkey, 'entry', 'status', ...), and the
-- entry still carries the job and the job is queued or in progress. This is the fence of every
-- transition a worker or recovery asks for with an entry in hand (finish, release, recover).
local function cv_live(h, entry)
  return h[1] == entry and (h[2] == 'queued' or h[2] == 'in_progress')
end
