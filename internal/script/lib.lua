-- lib.lua: the reply codes and the Lua helpers that know no job. script.New joins the codes and
-- the helpers a script uses in front of its source. The job's own functions are the caller's
-- library (Library), joined first; they may use these helpers too.

-- Reply codes. Every script answers {code, ...}: a code from this list, then what the script
-- says it returns with it. internal/script names the same codes in Go (Code); a test keeps the
-- two lists in step. A script that applies many items (finish, enqueue) answers CV_OK and then
-- one code per item.
local CV_OK = 0
local CV_NOT_FOUND = 1
local CV_EXISTS = 2
local CV_UNIQUE_HELD = 3
local CV_REFUSED = 4
local CV_WRONG_STATE = 5
local CV_NO_TYPE = 6
local CV_LOCK_LOST = 7
local CV_DIED = 8
local CV_CONFLICT = 9
local CV_DEFERRED = 10
local CV_FULL = 11

-- The fields of stream entry `id` as a table, or nil when the entry is gone.
local function cv_entry(stream, id)
  local r = redis.call('XRANGE', stream, id, id)
  if #r == 0 then return nil end
  local f, t = r[1][2], {}
  for i = 1, #f, 2 do t[f[i]] = f[i + 1] end
  return t
end

-- Runs redis.call(cmd, key, <args...>, <list...>) with list in chunks: Lua's unpack fails past
-- a few thousand values (LUAI_MAXCSTACK, 8000), after the script's earlier writes were applied,
-- and scripts are not rolled back. args is a Lua array of the arguments before the list.
local function cv_call_list(cmd, key, args, list)
  local step = 1000
  if #list <= step then
    if #args == 0 then return redis.call(cmd, key, unpack(list)) end
    local a = {cmd, key}
    for _, v in ipairs(args) do a[#a + 1] = v end
    for _, v in ipairs(list) do a[#a + 1] = v end
    return redis.call(unpack(a))
  end
  for i = 1, #list, step do
    local a = {cmd, key}
    for _, v in ipairs(args) do a[#a + 1] = v end
    for j = i, math.min(i + step - 1, #list) do a[#a + 1] = list[j] end
    redis.call(unpack(a))
  end
end

-- Acknowledges and deletes the entries listed in ids (a Lua array), in one call each (per
-- thousand).
local function cv_drop(stream, group, ids)
  if #ids == 0 then return end
  if #ids <= 1000 then
    redis.call('XACK', stream, group, unpack(ids))
    redis.call('XDEL', stream, unpack(ids))
  else
    cv_call_list('XACK', stream, {group}, ids)
    cv_call_list('XDEL', stream, {}, ids)
  end
end

-- After `id` was added to the scheduled set with score `due`: when it is now the earliest, tell
-- sleeping schedulers on the wake channel so they wake early.
local function cv_wake_if_first(scheduled, channel, id, due)
  local first = redis.call('ZRANGE', scheduled, 0, 0)
  if first[1] == id then redis.call('PUBLISH', channel, due) end
end

-- Announces jobs' changes of status on the queue's events channel (internal/events) as one
-- message: lines is a Lua array of "<status> <attempt> <id>" strings. cmd is what the caller
-- found the server supports, 'SPUBLISH' or 'PUBLISH'; anything else (normally '') publishes
-- nothing, so a script never fails on a server without sharded Pub/Sub.
local function cv_announce(cmd, channel, lines)
  if #lines > 0 and (cmd == 'SPUBLISH' or cmd == 'PUBLISH') then
    redis.call(cmd, channel, table.concat(lines, '\n'))
  end
end

-- The hash field `f` as a number, or d when absent.
local function cv_num(v, d)
  local n = tonumber(v)
  if n == nil then return d end
  return n
end
