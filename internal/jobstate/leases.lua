-- leases.lua: renew, give back or end a worker session's leases of one queue's limits (the
-- other half of admit.lua, which grants them), and take back the slots of holders whose lease
-- ran out.
-- KEYS[1] stream, KEYS[2] limits hash (keys.Queue.Limits)
-- ARGV[1] limit prefix lp, ARGV[2] job key prefix, ARGV[3] holder, ARGV[4] the holder's lease
--   (ms), or '0' when the holder ends (its slots all given back, its lease record deleted),
--   then 4 values per instance: instance, the slot numbers given back (','-joined, or ''),
--   the rate tokens given back ('<stamp>:<count>' pairs, ','-joined, or '': the stamp is that
--   of the admit.lua call that granted them), '1' when the holder is done with the instance (it holds no
--   slot of it any more: it leaves lp..'hs:'..holder, checked, so that the set does not grow
--   with every limit key a long-lived worker ever saw)
-- Returns {CV_OK, lost, then the instances the holder has slots of that have waiting jobs}: the
-- worker gives their free slots back at once, and takes no more of them without asking, so
-- that its spare slots do not sit idle while jobs wait for them. lost is 1 when the holder's
-- lease had run out and its slots were taken back (it was cut off from Redis for longer than
-- its lease): the worker forgets them, and leases again.
-- A slot given back wakes a waiting job (cv_give_names). A token given back leaves the rate's
-- log, as if it had not been granted: a worker leases tokens ahead of the jobs it reads, and
-- returns those it did not use soon.
local stream, lp, jprefix, holder = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local lease_ms = tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) -- us
local now_ms = math.floor(now / 1000)
local now_ms_s = tostring(now_ms)
local score = tonumber(redis.call('ZSCORE', lp .. 'hz:', holder))
local lost = (not score or score < now_ms) and 1 or 0
local hs = lp .. 'hs:' .. holder
if score and score < now_ms then
  -- Run out but not taken back yet: take it back now, so that what the worker forgets is gone.
  cv_reap_holder(lp, holder, stream, jprefix, now_ms_s)
end
local limits = nil
for a = 5, #ARGV, 4 do
  local inst, names, tokens, forget = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3] == '1'
  if names ~= '' and lost == 0 then
    local nums = {}
    for n in string.gmatch(names, '[^,]+') do nums[#nums + 1] = n end
    cv_give_names(lp, inst, holder, nums, stream, jprefix, now_ms_s)
  end
  if forget and lost == 0 then
    -- Only when none of the holder's names is left: a grant of a call the worker had not yet
    -- heard back from may have added one. A big set is not searched; the instance then stays.
    local set = lp .. 'c:' .. inst
    if redis.call('SCARD', set) <= 1000 then
      local pat = string.gsub(holder, '[%*%?%[%]\\]', '\\%0') .. '#*'
      local r = redis.call('SSCAN', set, '0', 'MATCH', pat, 'COUNT', 1000)
      if r[1] == '0' and #r[2] == 0 then redis.call('SREM', hs, inst) end
    end
  end
  if tokens ~= '' then
    limits = limits or cv_read_limits(KEYS[2])
    local l = limits[cv_limit_field(inst)]
    if l and l.rate > 0 then
      local key = lp .. 'rl:' .. inst
      local log = cv_rate_read(key, now, l.interval)
      if #log > 0 then
        for stamp, c in string.gmatch(tokens, '(%d+):(%d+)') do
          cv_rate_give(log, tonumber(stamp), tonumber(c))
        end
        cv_rate_save(key, log, now, l.interval)
      end
    end
  end
end
if lease_ms == 0 then
  cv_reap_holder(lp, holder, stream, jprefix, now_ms_s)
  redis.call('ZREM', lp .. 'hz:', holder)
else
  redis.call('ZADD', lp .. 'hz:', now_ms + lease_ms, holder)
end
cv_reap_holders(lp, stream, jprefix, now_ms, now_ms_s)
local out = {CV_OK, lost}
if lease_ms > 0 and redis.call('EXISTS', lp .. 'ws:') == 1 then
  for _, inst in ipairs(redis.call('SINTER', lp .. 'ws:', hs)) do out[#out + 1] = inst end
end
return out
