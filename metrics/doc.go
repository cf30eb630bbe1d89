// Package metrics exports Conveyor's Prometheus metrics: a worker's (its jobs by outcome,
// their durations and queue latency, its scheduler, recoverer and Redis errors) and the
// queues' (jobs by state and the queues' counters, read through pipeline.Inspector).
//
// It is a package of its own, not part of pipeline, so that a program that wants no
// Prometheus does not link it: pipeline offers hooks (WorkerConfig.Hooks), and this package
// turns them into series registered on a prometheus.Registerer of the caller's choosing (its
// own registry, or the default one).
//
// # A worker's series
//
// A Worker collects them; wire it in two places:
//
//	m, err := metrics.NewWorker(reg)
//	rdb.AddHook(m.RedisHook())                                                 // Redis errors
//	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Hooks: m.Hooks()}) // jobs, scheduler, recoverer
//
// The jobs are counted as the worker writes their outcomes, a chunk at a time, into plain
// atomic counters that become Prometheus metrics only when scraped: no Prometheus call runs
// per job. (Worker.Middleware, which counted them before, is kept for old programs and does
// nothing.)
//
// Its series:
//
//   - conveyor_jobs_total{queue,type,outcome}: attempts by outcome: completed, retry, dead,
//     canceled, lost, abandoned, snoozed (pipeline.Outcome), or error (a middleware refused the job:
//     it returned an error of its own).
//   - conveyor_job_duration_seconds{queue,type}: histogram of attempts, from the start of
//     their handling until their outcome is written.
//   - conveyor_job_queue_latency_seconds{queue}: histogram of the wait from a job's stream
//     entry (its enqueue; for a delayed, retried or recovered job, when it was put in the
//     stream, a few milliseconds after its due time) to the start of its attempt. The entry's
//     time is Redis's clock and the start the worker's: their skew adds to it.
//   - conveyor_scheduler_promoted_total{queue} and conveyor_scheduler_lag_seconds{queue}:
//     delayed and retried jobs promoted by the worker's scheduler, and a histogram of how late
//     the most overdue job of each promotion was.
//   - conveyor_recovery_scans_total{queue}, conveyor_recovered_jobs_total{queue,result}
//     (result requeued or dead), conveyor_recovery_lock_held{queue} (1 while the worker holds
//     the queue's recovery lock, during a scan).
//   - conveyor_schedule_ticks_total{schedule,result}: periodic schedules' ticks the worker's
//     scheduler handled (pipeline.WorkerHooks.ScheduleTick, ScheduleMissed): result on_time or
//     late (enqueued within pipeline.PeriodicTakeover of the tick, or later), skipped or
//     merged (older than pipeline.PeriodicGrace: dropped, or run as one job). The schedule label
//     holds the first MaxScheduleLabels (100) schedules the worker saw, and ScheduleOther for
//     the rest. Every worker runs a scheduler, and normally the one holding the schedules' lock
//     enqueues: sum the series over workers.
//   - conveyor_schedule_tick_delay_seconds: histogram of how long after its time each tick
//     was enqueued.
//   - conveyor_redis_errors_total{kind}: calls of the client that failed: kind "reply" for an
//     error Redis answered (OOM, READONLY, LOADING, NOPERM, ...), "connection" for one that
//     did not reach it or got no answer.
//
// The type label holds the types of the worker's handlers, and TypeUnhandled for a job whose
// type no handler takes (so a producer cannot make series without bound by sending types
// nobody handles); it is empty for an unreadable stream entry.
//
// # The queues' series
//
// A QueueCollector reads every queue's (or the listed queues') gauges and counters through an
// Inspector and caches them for MaxAge, so a scrape costs at most one refresh, of a bounded
// number of Redis round trips, however many queues there are and however often Prometheus
// (or several of them) scrapes:
//
//   - conveyor_queue_jobs{queue,state}: jobs scheduled, queued, in_progress and dead now.
//   - conveyor_queue_enqueued_total, conveyor_queue_completed_total,
//     conveyor_queue_failed_total, conveyor_queue_retried_total,
//     conveyor_queue_recovered_total and conveyor_queue_canceled_total, each {queue}: the
//     queue's counters, kept in Redis since the queue was created, shared by all its workers.
//   - conveyor_queue_stats_age_seconds: how old the reading served is;
//     conveyor_queue_stats_errors_total: refreshes that failed (the last reading is served
//     meanwhile).
package metrics
