-- wf_cascade.lua: follow a bounded part of the queue's workflow cascades (lua/workflows.lua's
-- cv_wf_follow): the dependents of ended tasks that the scripts which ended them left on the
-- queue's work list, past the edges one call may follow.
-- KEYS[1] the work list (keys.Queue.WorkflowCascade), KEYS[2] stream, KEYS[3] stats hash
-- ARGV[1] now (unix ms), ARGV[2] the edges to follow at most, ARGV[3] the job key prefix
--   (keys.Queue.JobPrefix), ARGV[4] the events publish command ('SPUBLISH', 'PUBLISH' or ''),
--   ARGV[5] the events channel
-- Each edge is followed once: the items are taken off the list and what is left of them put
-- back in the same call. The tasks it cancels are announced (canceled).
-- Returns {CV_OK, the items left on the list, the tasks canceled, the tasks released}.
local ev = {}
local ctx = {jprefix = ARGV[3], stream = KEYS[2], stats = KEYS[3], now = ARGV[1], ev = ev,
  budget = tonumber(ARGV[2]), todo = {}}
local released = cv_wf_follow(ctx)
cv_announce(ARGV[4], ARGV[5], ev)
return {CV_OK, ctx.left, #ev, released}
