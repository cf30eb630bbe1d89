// Package periodic runs periodic schedules. A schedule is a cron expression or an "@every"
// interval, and enqueues one job per tick into a queue. Cron uses robfig/cron/v3's syntax, with
// an optional seconds field and CRON_TZ= time zones. pipeline.Periodic and the Inspector's
// schedule calls are its public face. The worker runs its Scheduler as one of its services.
//
// # Model
//
// Schedules live in Redis under the prefix, in one hash of JSON definitions (keys.Schedules). So
// every worker runs the same ones, and a schedule can be added without a deploy. A worker stores
// its own (code, --cron) at start. Each schedule has a state hash (keys.ScheduleState). Its Last
// says up to when every tick was handled. At most DefaultMaxSchedules are stored
// (Store.WithMax); past it Put fails with ErrTooMany.
//
// A sorted set, the due index (keys.SchedulesDue), scores each schedule that is not paused. The
// score is when it must next be looked at: its next tick. It is 0 once the schedule was stored
// again or resumed, because its next tick depends on its Last, and a script cannot compute that
// from a spec.
//
// A pass of a Scheduler reads the index's first entry. When it is due, the pass reads the due
// entries, at most dueBatch (ZRANGEBYSCORE with a LIMIT). It reads their schedules' states, a
// chunk at a time. For each it enqueues the ticks after Last that are due. A compare-and-set of
// Last follows each, which also scores the schedule by its next tick (advance.lua).
//
// A score may be early, never late. An early one costs a read, and the pass scores the schedule
// again (index.lua). The one late score is deliberate. A schedule whose tick failed is scored
// Refresh later. So failing schedules, however many, do not fill every pass's batch ahead of the
// others. An idle pass costs one read and the lock's extension, however many schedules are
// stored. A pass reads only what is due.
//
// A write that changes a schedule's definition or pause bumps its state's gen. A scheduler
// scores a schedule only while gen is what it read. So it never indexes a schedule by a replaced
// definition. A second sorted set (keys.SchedulesNames) lists the names for paging (Store.Page).
// Schedules stored by a version without the indexes get indexed when a scheduler starts. That
// happens again every minute when the counts of the indexes say some are missing (migrate.lua,
// idempotent).
//
// # Exactly one job per tick
//
// The guarantee is the job id. A tick's job is enqueued with the id TickID(name, tick), the same
// in every worker. Enqueueing an id that exists writes nothing (pipeline.WithID). So any number
// of schedulers may enqueue a tick, at once or one after another, and one job comes of it. That
// holds on a partitioned queue too, since the id picks the partition.
//
// The lock (keys.SchedulesLock) is an efficiency. Its holder runs ticks on time. The others run
// a tick only once it is Takeover (500 ms) late. So normally one scheduler writes. A leader's
// death costs at most about Takeover of lateness. On SIGKILL its lock lives on for LockTTL, 3 s.
//
// Last is the guarantee beyond the job's life: a tick at or before Last is never enqueued again,
// even once its job was pruned (retention). The enqueue and the move of Last are two steps. The
// job's keys are in its queue's hash tag, the state in the schedules' own. A scheduler that dies
// between them leaves a tick that the next one enqueues again. That second enqueue finds the
// first job by its id. A finished job's record (at least a tombstone) is kept for MinRetention,
// 1 min by default. That is far longer than the next pass takes.
//
// A scheduler could stall between its read of Last and an enqueue. If it stalled past that job's
// retention, it could make a second job. So it leaves due a schedule whose read is older than
// staleAfter (1 s), and reads it again at the next pass, at once. The age counts from the read
// of that schedule's state, never from a listing of all.
//
// # Missed ticks
//
// A tick later than Grace (1 min) is missed. Either no scheduler ran, every worker being down,
// or they fell behind. The warning tells which: it says when this scheduler did run within the
// grace. The schedule's policy says what the missed ticks become. MissedSkip drops them.
// MissedOnce enqueues one job for all of them, with the id of the first. Ticks later than
// Takeover but within Grace are late, not missed: each is enqueued. A pause drops the ticks it
// covers.
//
// # Clocks
//
// A tick's time depends on its spec alone, never on the clock that computed it. So schedulers
// whose clocks differ still name a tick's job alike. A clock that is ahead only makes its
// scheduler enqueue early. The next tick is not due before its time by that clock.
package periodic
