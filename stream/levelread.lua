-- levelread.lua: read a level's stream unless a lower level of its family has entries that
-- the group has not been delivered yet (Config.Levels).
-- KEYS[1] the stream to read; KEYS[2..] the lower levels' streams, lowest first
-- ARGV[1] group, ARGV[2] consumer, ARGV[3] count
-- Returns the position in KEYS[2..] (1 for KEYS[2]) of the first lower stream with entries
-- past the group's last delivered id, reading nothing; else XREADGROUP's reply for KEYS[1]
-- (no BLOCK: a script cannot wait). Checking and reading in one script is what makes the
-- order strict: no entry of a lower level can be added between the check and the read.
for i = 2, #KEYS do
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', KEYS[i])
  if ok then
    for _, g in ipairs(groups) do
      local name, last
      for j = 1, #g, 2 do
        if g[j] == 'name' then
          name = g[j + 1]
        elseif g[j] == 'last-delivered-id' then
          last = g[j + 1]
        end
      end
      if name == ARGV[1] then
        if last and #redis.call('XRANGE', KEYS[i], '(' .. last, '+', 'COUNT', 1) > 0 then
          return i - 1
        end
        break
      end
    end
  end
end
return redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3], 'STREAMS', KEYS[1], '>')
