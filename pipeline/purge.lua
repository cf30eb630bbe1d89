-- purge.lua: delete up to ARGV[2] of the oldest dead jobs that died before ARGV[3].
-- KEYS[1] dead set
-- ARGV[1] job key prefix, ARGV[2] limit, ARGV[3] max time of death (unix ms)
-- Returns {CV_OK, the number deleted}; callers loop until it is below the limit.
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[3], 'LIMIT', 0, ARGV[2])
for _, id in ipairs(ids) do
  redis.call('DEL', ARGV[1] .. id)
end
if #ids > 0 then cv_call_list('ZREM', KEYS[1], {}, ids) end
return {CV_OK, #ids}
