-- reseal.lua: replace stored payloads, results and log lines with their bytes re-sealed under
-- the newest key (key rotation: pipeline.Inspector.RotateKeys), each only while it still holds
-- the bytes the caller read: a compare-and-set, so a job that moved on meanwhile is skipped, never
-- clobbered.
-- KEYS[1..4] the queue's (partition's) streams of priority levels 1 to 4 (keys.Queue.LevelStream),
--   KEYS[4+i] the hash (or, mode 'L', the list) item i names
-- ARGV[1] the consumer group (keys.Group), then 4 values per item: mode, name, old, new
--   mode 'H': field `name` of a job's hash: in pieces when the job is completed (record.lua:
--     cv_put_long, as finish.lua writes it), else whole (the scripts that move a job on read
--     the field whole); the pieces the new value no longer needs are deleted
--   mode 'W': field `name` of a workflow's hash (a task's result), kept whole
--   mode 'L': the item at index `name` of a job's logs list (an attempt's head and lines,
--     record.lua's cv_logs_put), whole: the scripts that write a running attempt's lines
--     replace its item whole, so a changed item is refused, never mixed
--   mode 'E': the job's stream entry `name`, while the job is queued, its hash names the entry
--     and no worker has read it (the group's last-delivered id is before it and it is in no
--     pending list). Stream entries are immutable: a new entry with the same fields and the
--     new payload is added at the back of the job's level stream, the hash names it, and the
--     old one is deleted, all in this call.
-- Returns {CV_OK, then one code per item}: CV_OK (replaced), CV_REFUSED (the value is not the
-- one read, or the job moved on: nothing written), CV_WRONG_STATE (its entry was delivered to a
-- worker: nothing written), CV_NOT_FOUND (the hash is gone, or is no job's: an entry another
-- Watermill publisher added; nothing written).
local group, out = ARGV[1], {CV_OK}
local delivered = {}

-- The whole value of field name of hash k, and how many pieces after the first it spans.
local function rs_read(k, name)
  local first = redis.call('HGET', k, name)
  if not first or #first ~= 64 then return first, 0 end
  local parts, n = {first}, 0
  while true do
    local v = redis.call('HGET', k, name .. '+' .. (n + 1))
    if not v then break end
    n = n + 1
    parts[#parts + 1] = v
  end
  return table.concat(parts), n
end

-- Stream entry id a as two numbers.
local function rs_id(a)
  local ms, seq = string.match(a or '', '^(%d+)-(%d+)$')
  return tonumber(ms) or 0, tonumber(seq) or 0
end

-- The group's last-delivered id in stream, '0-0' when it has no such group; read once a call.
local function rs_last(stream)
  if delivered[stream] then return delivered[stream] end
  local last = '0-0'
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local name, ld
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then ld = g[i + 1] end
    end
    if name == group then last = ld end
  end
  delivered[stream] = last
  return last
end

local function rs_entry(k, name, old, new)
  local h = redis.call('HMGET', k, 'entry', 'status', 'priority', 'payload')
  if h[1] ~= name or h[2] ~= 'queued' or h[4] then return CV_REFUSED end
  local level = tonumber(h[3]) or 1
  if level < 1 or level > 4 then level = 1 end
  local stream = KEYS[level]
  local r = redis.call('XRANGE', stream, name, name)
  if #r == 0 then return CV_REFUSED end
  local last = rs_last(stream)
  local am, as = rs_id(name)
  local bm, bs = rs_id(last)
  if am < bm or (am == bm and as <= bs) then return CV_WRONG_STATE end
  if last ~= '0-0' and #redis.call('XPENDING', stream, group, name, name, 1) > 0 then
    return CV_WRONG_STATE
  end
  local f, found = r[1][2], false
  for i = 1, #f, 2 do
    if f[i] == 'payload' then
      if f[i + 1] ~= old then return CV_REFUSED end
      f[i + 1] = new
      found = true
    end
  end
  if not found then return CV_REFUSED end
  local e = redis.call('XADD', stream, '*', unpack(f))
  redis.call('HSET', k, 'entry', e)
  redis.call('XDEL', stream, name)
  return CV_OK
end

for i = 0, (#ARGV - 1) / 4 - 1 do
  local a = 2 + 4 * i
  local mode, name, old, new, k = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], KEYS[5 + i]
  local code = CV_REFUSED
  if redis.call('EXISTS', k) == 0 then
    code = CV_NOT_FOUND
  elseif mode == 'E' then
    code = rs_entry(k, name, old, new)
  elseif mode == 'L' then
    local at = tonumber(name)
    if at and redis.call('LINDEX', k, at) == old then
      redis.call('LSET', k, at, new)
      code = CV_OK
    end
  elseif mode == 'W' then
    if redis.call('HGET', k, name) == old then
      redis.call('HSET', k, name, new)
      code = CV_OK
    end
  else
    local cur, n = rs_read(k, name)
    if cur == old then
      local f = {}
      if redis.call('HGET', k, 'status') == 'completed' then
        cv_put_long(f, name, new)
      else
        f = {name, new}
      end
      redis.call('HSET', k, unpack(f))
      for j = #f / 2, n do redis.call('HDEL', k, name .. '+' .. j) end
      code = CV_OK
    end
  end
  out[#out + 1] = code
end
return out
