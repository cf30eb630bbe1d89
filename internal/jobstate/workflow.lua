-- workflow.lua: publish a workflow (or a batch): its hash and every task, in one call.
-- KEYS[1] stream, KEYS[2] stats hash, KEYS[3] the workflow's hash (keys.Queue.Workflow),
--   KEYS[4] the closed flag (keys.Closed), KEYS[5] the queue's workflows flag
--   (keys.Queue.Workflows), KEYS[6] the queue's index of workflows (keys.Queue.WorkflowIndex),
--   KEYS[7] the queue's index of waiting tasks (keys.Queue.WorkflowWaiting), then KEYS[7+i]
--   the hash of task i
-- ARGV[1] now (unix ms), ARGV[2] name, ARGV[3] kind, ARGV[4] the tasks as JSON (what readers
--   show; the scripts never parse it), ARGV[5] the retention (ms) the workflow's hash takes
--   once it finished, ARGV[6] the index's cap (keys.WorkflowIndexCap), ARGV[7] the workflow's
--   id, ARGV[8] its digest (jobstate.NewWorkflow.Digest: the tasks' names, types,
--   dependencies and payloads), then 11 values per task, in a topological order:
--   id, name, type, payload, metadata, max_retries, timeout_ms, retention_ms ('' = the queue
--   default), the ids it waits for, the ids that wait for it (both space-separated), then
--   '1' for a Finally task ('' otherwise)
-- A task that waits for none is queued at once (a stream entry); the others are 'waiting',
-- with their payload and metadata in their hash, and in the index of waiting tasks (scored by
-- now), until the script that ends their last dependency puts them into the stream
-- (lua/workflows.lua's cv_wf_end).
-- Returns {CV_WRONG_STATE} when the closed flag is set (the queue's partition count changed:
-- nothing written); {CV_EXISTS} when the workflow exists with the same digest (a publish sent
-- again: as a job's id with the same type and payload), {CV_CONFLICT, what} when it exists
-- with another or a task's id names a job that exists (nothing written); else {CV_OK, then
-- the entry id of each task queued at once ('' for a waiting one)}.
if redis.call('EXISTS', KEYS[4]) == 1 then return {CV_WRONG_STATE} end
if redis.call('EXISTS', KEYS[3]) == 1 then
  if redis.call('HGET', KEYS[3], 'digest') == ARGV[8] then return {CV_EXISTS} end
  return {CV_CONFLICT, 'the workflow exists with other tasks or payloads'}
end
local n = 0
for a = 9, #ARGV, 11 do
  n = n + 1
  if redis.call('EXISTS', KEYS[7 + n]) == 1 then
    return {CV_CONFLICT, 'job ' .. ARGV[a] .. ' exists'}
  end
end
local now = ARGV[1]
local wfkey = KEYS[3]
redis.call('SET', KEYS[5], '1')
redis.call('HSET', wfkey, 'name', ARGV[2], 'kind', ARGV[3], 'doc', ARGV[4], 'digest', ARGV[8],
  'created_at', now,
  'retention_ms', ARGV[5], 'tasks', n, 'completed', 0, 'failed', 0, 'canceled', 0, 'purged', 0)
local out = {CV_OK}
local i = 0
for a = 9, #ARGV, 11 do
  i = i + 1
  local id, name, typ, payload, md = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local mr, tmo, ret = ARGV[a + 5], ARGV[a + 6], ARGV[a + 7]
  local deps, nxt, mode = ARGV[a + 8], ARGV[a + 9], ARGV[a + 10]
  local ndeps = 0
  for _ in string.gmatch(deps, '%S+') do ndeps = ndeps + 1 end
  local f = {'type', typ, 'max_retries', mr, 'created_at', now, 'version', '1', 'wf', wfkey,
    'wf_task', name, 'wf_topo', i, 'wf_left', ndeps}
  if tmo ~= '0' then f[#f + 1] = 'timeout_ms'; f[#f + 1] = tmo end
  if ret ~= '' then f[#f + 1] = 'retention_ms'; f[#f + 1] = ret end
  if deps ~= '' then f[#f + 1] = 'wf_deps'; f[#f + 1] = deps end
  if nxt ~= '' then f[#f + 1] = 'wf_next'; f[#f + 1] = nxt end
  if mode ~= '' then f[#f + 1] = 'wf_mode'; f[#f + 1] = mode end
  if ndeps == 0 then
    local e = cv_xadd(KEYS[1], id, payload, md, typ, '1', mr, tmo)
    f[#f + 1] = 'status'; f[#f + 1] = 'queued'
    f[#f + 1] = 'entry'; f[#f + 1] = e
    out[#out + 1] = e
  else
    f[#f + 1] = 'status'; f[#f + 1] = 'waiting'
    f[#f + 1] = 'payload'; f[#f + 1] = payload
    f[#f + 1] = 'metadata'; f[#f + 1] = md
    out[#out + 1] = ''
    redis.call('ZADD', KEYS[7], now, id)
  end
  redis.call('HSET', KEYS[7 + i], unpack(f))
end
redis.call('HINCRBY', KEYS[2], 'enqueued', n)
redis.call('ZADD', KEYS[6], now, ARGV[7]) -- the index of workflows, trimmed to its cap
local over = redis.call('ZCARD', KEYS[6]) - tonumber(ARGV[6])
if over > 0 then redis.call('ZREMRANGEBYRANK', KEYS[6], 0, over - 1) end
return out
