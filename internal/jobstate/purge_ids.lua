-- purge_ids.lua: delete the given dead jobs.
-- KEYS[1] dead set, KEYS[1+i] the hash of job i
-- ARGV[i] the id of job i
-- A job is deleted (its hash and its place in the dead set) only while it is in the dead set;
-- any other job is left as it is. Its logs key (keys.Queue.Logs) goes with its hash.
-- Returns {CV_OK, then two values per job}: CV_OK and '' (deleted), CV_WRONG_STATE and the
-- job's status (not dead: nothing changed), or CV_NOT_FOUND and '' (no such job).
local dead, out = KEYS[1], {CV_OK}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, #ARGV do
  local id, jobkey = ARGV[i], KEYS[1 + i]
  if redis.call('ZSCORE', dead, id) then
    cv_wf_purged(jobkey, id, now) -- a workflow's task: counted purged (lua/workflows.lua)
    redis.call('DEL', jobkey, cv_logs_key(jobkey, id))
    redis.call('ZREM', dead, id)
    out[#out + 1] = CV_OK
    out[#out + 1] = ''
  else
    local status = redis.call('HGET', jobkey, 'status')
    if status then
      out[#out + 1] = CV_WRONG_STATE
      out[#out + 1] = status
    else
      out[#out + 1] = CV_NOT_FOUND
      out[#out + 1] = ''
    end
  end
end
return out
