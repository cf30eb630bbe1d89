-- renew.lua: renew the leases of entries still pending for this consumer.
-- KEYS[1] stream
-- ARGV[1] group, ARGV[2] consumer, ARGV[3..] entry ids
-- Returns the ids re-claimed: pending for the consumer and still in the stream. XCLAIM alone
-- would also take entries that another consumer (a recoverer) claimed meanwhile; XPENDING with
-- the consumer filter leaves those alone. XCLAIM with min-idle 0 and JUSTID resets the idle
-- time, keeps the delivery count, and drops (and does not return) entries deleted from the
-- stream.
local mine = {}
for i = 3, #ARGV do
  if #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2]) > 0 then
    mine[#mine + 1] = ARGV[i]
  end
end
if #mine == 0 then
  return mine
end
mine[#mine + 1] = 'JUSTID'
return redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, unpack(mine))
