-- Makes a queue a known queue unless the set of known queues is full: the check and the add in
-- one step, so that concurrent publishers cannot overshoot the bound.
-- KEYS[1] the known-queues set (keys.Queues); ARGV[1] the queue; ARGV[2] the most queues;
-- ARGV[3] '1' to add nothing (only known queues pass).
-- Returns 1 (known or added), 0 (full) or -1 (unknown, with ARGV[3] '1').
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 1 end
if ARGV[3] == '1' then return -1 end
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('SADD', KEYS[1], ARGV[1])
return 1
