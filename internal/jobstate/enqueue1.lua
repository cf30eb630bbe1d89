-- enqueue1.lua: create one job to run at once, with no unique key, timeout or retention of its
-- own: the most common publish, kept as cheap as a script can be (enqueue.lua does the rest).
-- KEYS[1] stream, KEYS[2] stats hash, KEYS[3] job hash
-- ARGV[1] id, ARGV[2] type, ARGV[3] payload, ARGV[4] metadata, ARGV[5] max_retries,
--   ARGV[6] now (unix ms)
-- Returns the new entry id, or CV_EXISTS when the id exists already (nothing written): the one
-- script whose reply is not {code, ...}, because a bare string costs a single publish 5% less
-- than an array (docs/BENCHMARKS.md). It is kept beside enqueue.lua because it costs Redis
-- half as much per single publish (the same page).
if redis.call('EXISTS', KEYS[3]) == 1 then return CV_EXISTS end
local e = cv_xadd(KEYS[1], ARGV[1], ARGV[3], ARGV[4], ARGV[2], '1', ARGV[5], '0')
redis.call('HSET', KEYS[3], 'type', ARGV[2], 'status', 'queued', 'max_retries', ARGV[5],
  'created_at', ARGV[6], 'entry', e, 'version', '1') -- '1', not 1: see enqueue.lua
redis.call('HINCRBY', KEYS[2], 'enqueued', 1)
return e
