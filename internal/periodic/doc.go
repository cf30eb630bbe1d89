// Package periodic runs periodic schedules: cron expressions (robfig/cron/v3's syntax, with an
// optional seconds field and CRON_TZ= time zones) and "@every" intervals, each enqueueing one
// job per tick into a queue. pipeline.Periodic and the Inspector's schedule calls are its
// public face; the worker runs its Scheduler as one of its services.
//
// # Model
//
// Schedules live in Redis under the prefix (keys.Schedules, one hash of JSON definitions), so
// every worker runs the same ones and a schedule can be added without a deploy; a worker
// stores its own (code, --cron) at start. Each schedule has a state hash (keys.ScheduleState)
// whose Last says up to when every tick was handled. A pass of a Scheduler reads all of them
// (two round trips), and for each schedule enqueues the ticks after Last that are due, each
// followed by a compare-and-set of Last (advance.lua).
//
// # Exactly one job per tick
//
// The guarantee is the job id: a tick's job is enqueued with the id TickID(name, tick), the
// same in every worker, and enqueueing an id that exists writes nothing (pipeline.WithID). So
// any number of schedulers may enqueue a tick, at once or one after another, and one job
// comes of it, on a partitioned queue too (the id picks the partition). The lock
// (keys.SchedulesLock) is an efficiency: its holder runs ticks on time, and the others run a
// tick only once it is Takeover (500 ms) late, so that normally one scheduler writes and a
// leader's death (SIGKILL; its lock lives on for LockTTL, 3 s) costs at most about Takeover of
// lateness.
//
// Last is the guarantee beyond the job's life: a tick at or before Last is never enqueued
// again, even once its job was pruned (retention). The enqueue and the move of Last are two
// steps (the job's keys are in its queue's hash tag, the state in the schedules' own), so a
// scheduler that dies between them leaves a tick that the next one enqueues again; that
// second enqueue finds the first job by its id, since a finished job's record (at least a
// tombstone) is kept for MinRetention (1 min by default), far longer than the next pass
// takes. A scheduler that stalls between its read of Last and an enqueue could, if it stalled
// past that job's retention, make a second job: it gives up a pass whose read is older than
// staleAfter (1 s) instead.
//
// # Missed ticks
//
// A tick later than Grace (1 min) counts as missed (no scheduler ran: every worker was down).
// The schedule's policy says what the missed ticks become: MissedSkip drops them, MissedOnce
// enqueues one job for all of them, with the id of the first. Ticks later than Takeover but
// within Grace are late, not missed: each is enqueued. A pause drops the ticks it covers.
//
// # Clocks
//
// A tick's time depends on its spec alone, never on the clock that computed it, so schedulers
// whose clocks differ still name a tick's job alike; a clock that is ahead only makes its
// scheduler enqueue early (the next tick is not due before its time by that clock).
package periodic
