-- adopt.lua: claim this consumer's orphaned entries for it again, with their fields.
-- KEYS[1] stream
-- ARGV[1] group, ARGV[2] consumer, ARGV[3..] entry ids
-- Returns the entries claimed as XCLAIM does: {{id, {field, value, ...}}, ...}. An entry is
-- claimed only while it is pending for this consumer: one that a recoverer took since the
-- sweep listed it is left alone, which a bare XCLAIM would not do. XCLAIM with min-idle 0
-- returns the fields and resets the idle time; RETRYCOUNT keeps the delivery count, since the
-- lost delivery never reached a handler. An entry deleted from the stream is dropped from the
-- pending list by XCLAIM and not returned (Redis 7; older servers return nil for it, skipped).
local out = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
  if #p > 0 then
    local c = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'RETRYCOUNT', p[1][4])
    if c[1] then
      out[#out + 1] = c[1]
    end
  end
end
return out
