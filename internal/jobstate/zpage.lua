-- zpage.lua: one page of a sorted set (the scheduled or the dead set) after a cursor, for
-- listing. Equal scores are common (a batch scheduled for one time, jobs that died in the same
-- millisecond), so the cursor is a (score, member) pair: the page starts right after it in
-- Redis's own order (by score, then by member bytes), whether or not that member is still in
-- the set.
-- KEYS[1] sorted set
-- ARGV[1] 'ASC' (lowest score first) or 'DESC' (highest first), ARGV[2] the cursor's score ('' for
--   the first page), ARGV[3] the cursor's member, ARGV[4] count
-- Returns {CV_OK, member, score, member, score, ...}: up to count members after the cursor.
-- Work: O(log N) to find the start (when the cursor's member is gone, a binary search by rank
-- among the members that share its score), then O(count) for the page. Read-only.
local key, desc, n = KEYS[1], ARGV[1] == 'DESC', tonumber(ARGV[4])

-- x < y as Redis orders members of equal score: by bytes, the shorter first on a tie. (Lua's
-- own < uses the server's collation locale, which need not be bytewise.)
local function bytes_less(x, y)
  for i = 1, math.min(#x, #y) do
    local a, b = string.byte(x, i), string.byte(y, i)
    if a ~= b then return a < b end
  end
  return #x < #y
end

local start = 0 -- rank, in the page's order, of the first member after the cursor
if ARGV[2] ~= '' then
  local s, m = ARGV[2], ARGV[3]
  -- lt: how many members come before (s, m) in ascending order; at: whether (s, m) is one.
  local lt, at
  local cur = redis.call('ZSCORE', key, m)
  if cur and tonumber(cur) == tonumber(s) then
    lt, at = redis.call('ZRANK', key, m), true
  else
    local lo = redis.call('ZCOUNT', key, '-inf', '(' .. s)
    local hi = redis.call('ZCOUNT', key, '-inf', s)
    while lo < hi do -- ranks lo..hi-1 hold the members of score s, in byte order
      local mid = math.floor((lo + hi) / 2)
      if bytes_less(redis.call('ZRANGE', key, mid, mid)[1], m) then lo = mid + 1 else hi = mid end
    end
    lt, at = lo, false
  end
  if desc then
    start = redis.call('ZCARD', key) - lt
  else
    start = lt
    if at then start = start + 1 end
  end
end
local r
if desc then
  r = redis.call('ZREVRANGE', key, start, start + n - 1, 'WITHSCORES')
else
  r = redis.call('ZRANGE', key, start, start + n - 1, 'WITHSCORES')
end
table.insert(r, 1, CV_OK)
return r
