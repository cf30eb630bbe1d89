-- clock.lua: Redis's clock, read by a recoverer once per scan to check that it still runs with
-- the recoverer's own (see "Trust" in the package documentation).
-- KEYS[1] the queue's stream: only so that, in a cluster, the call goes to the node that holds
--   the queue (TIME alone would go to any node, with a clock of its own).
-- Returns {CV_OK, seconds, microseconds} (TIME's reply).
local t = redis.call('TIME')
return {CV_OK, t[1], t[2]}
