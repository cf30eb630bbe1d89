-- limitset.lua: set or delete one limit of a queue, and wake the jobs waiting for it.
-- KEYS[1] limits hash (keys.Queue.Limits), KEYS[2] stream
-- ARGV[1] the limit's field (scope), ARGV[2] its JSON value, or '' to delete it, ARGV[3] limit
--   prefix (keys.Queue.LimitPrefix), ARGV[4] job key prefix, ARGV[5] now (unix ms)
-- Every job waiting for a concurrency slot of the scope's instances goes back into the stream
-- (cv_wake), to be admitted again under the new limit: a raised or deleted limit frees them at
-- once, and those still over a lowered one wait again. Rate-deferred jobs keep their due times:
-- never earlier than the limit they were deferred by allowed.
-- Returns {CV_OK, changed (1 when the field was set anew or deleted, else 0), woken}.
local field, value, lp, jprefix, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local changed
if value == '' then
  changed = redis.call('HDEL', KEYS[1], field)
else
  changed = redis.call('HSET', KEYS[1], field, value)
end
-- The instances of the scope: the field itself, or for per-key scopes the field's instances
-- of every key ('qk:<key>', 'tk:<type> <key>').
local pre = nil
if field == 'qk' then pre = 'qk:' elseif string.sub(field, 1, 3) == 'tk:' then pre = field .. ' ' end
local woken = 0
for _, inst in ipairs(redis.call('SMEMBERS', lp .. 'ws:')) do
  if inst == field or (pre and string.sub(inst, 1, #pre) == pre) then
    while cv_wake(lp, inst, KEYS[2], jprefix, now) do woken = woken + 1 end
  end
end
return {CV_OK, changed, woken}
