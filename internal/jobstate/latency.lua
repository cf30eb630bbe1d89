-- latency.lua: the latency of a queue or partition, the age of its oldest job ready to run,
-- by Redis's clock.
-- KEYS the streams of its priority levels (keys.Queue.LevelStream 1..keys.MaxPriority), all
--   under its hash tag; ARGV[1] the consumer group.
-- A level's oldest ready job is its stream's first entry after the group's last-delivered id:
-- XREADGROUP '>' hands entries out in stream order, so no worker was handed any entry after it.
-- A stream no worker read yet (no group) has its first entry. An entry's id is the time it was
-- added (a publish, a promotion of a due job, a replay), so its age is TIME less that.
-- Read-only: XINFO GROUPS, XRANGE of one entry a level, TIME.
-- Returns {CV_OK, the largest age in ms over the levels (0: no job waits)}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local oldest
for _, stream in ipairs(KEYS) do
  if redis.call('EXISTS', stream) == 1 then
    local start = '-'
    for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
      local name, last
      for i = 1, #g, 2 do
        if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then last = g[i + 1] end
      end
      if name == ARGV[1] and last and last ~= '0-0' then start = '(' .. last end
    end
    local e = redis.call('XRANGE', stream, start, '+', 'COUNT', 1)[1]
    if e then
      local ms = tonumber(string.match(e[1], '^(%d+)-'))
      if ms and (not oldest or ms < oldest) then oldest = ms end
    end
  end
end
if not oldest then return {CV_OK, 0} end
return {CV_OK, math.max(0, now - oldest)}
