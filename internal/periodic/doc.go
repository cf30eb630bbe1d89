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
// whose Last says up to when every tick was handled. At most DefaultMaxSchedules are stored
// (Store.WithMax; past it Put fails with ErrTooMany).
//
// A sorted set, the due index (keys.SchedulesDue), scores each schedule that is not paused by
// when it must next be looked at: its next tick, or 0 once it was stored again or resumed
// (its next tick depends on its Last, which a script cannot compute from a spec). A pass of a
// Scheduler reads the index's first entry; when it is due, the due entries (at most dueBatch,
// ZRANGEBYSCORE with a LIMIT) and their schedules' states, a chunk at a time, and for each
// enqueues the ticks after Last that are due, each followed by a compare-and-set of Last that
// also scores the schedule by its next tick (advance.lua). A score may be early, never late:
// an early one costs a read, and the pass scores the schedule again (index.lua). The one late
// score is deliberate: a schedule whose tick failed is scored Refresh later, so that failing
// schedules, however many, do not fill every pass's batch ahead of the others. So an idle
// pass costs one read and the lock's extension however many schedules are stored, and a pass
// reads only what is due. A write that changes a schedule's definition or pause bumps its
// state's gen, and a scheduler scores a schedule only while gen is what it read, so that it
// never indexes a schedule by a definition that was replaced. A second sorted set
// (keys.SchedulesNames) lists the names for paging (Store.Page). Schedules stored by a
// version without the indexes are indexed when a scheduler starts, and every minute when
// the counts of the indexes say some are missing (migrate.lua, idempotent).
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
// past that job's retention, make a second job: it leaves a schedule whose read is older than
// staleAfter (1 s) due instead, and reads it again at the next pass, at once. The age is the
// read of that schedule's state, never of a listing of all.
//
// # Missed ticks
//
// A tick later than Grace (1 min) counts as missed (no scheduler ran: every worker was down; the
// warning says when this scheduler did run within the grace, which means they fell behind).
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
