// Package metrics exports Conveyor's Prometheus metrics. A worker's series cover its jobs by
// outcome, their durations and queue latency, its scheduler, recoverer and Redis errors. The
// queues' series cover jobs by state and the queues' counters, read through pipeline.Inspector.
//
// It is a package of its own, not part of pipeline, so a program that wants no Prometheus does
// not link it. Package pipeline offers hooks (WorkerConfig.Hooks). This package turns them into
// series registered on a prometheus.Registerer of the caller's choosing: its own registry, or
// the default one.
//
// # A worker's series
//
// A Worker collects them. Wire it in two places:
//
//	m, err := metrics.NewWorker(reg)
//	rdb.AddHook(m.RedisHook())                                                 // Redis errors
//	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Hooks: m.Hooks()}) // jobs, scheduler, recoverer
//
// The worker counts jobs as it writes their outcomes, a chunk at a time. It counts into plain
// atomic counters that become Prometheus metrics only when scraped. So no Prometheus call runs
// per job. (Worker.Middleware, which counted them before, is kept for old programs and does
// nothing.)
//
// Its series follow.
//
// `conveyor_jobs_total{queue,type,outcome}` counts attempts by outcome (pipeline.Outcome):
// completed, retry, dead, canceled, lost, abandoned, snoozed. Or error, when a middleware
// refused the job by returning an error of its own.
//
// `conveyor_job_duration_seconds{queue,type}` is a histogram of attempts, from the start of
// their handling until their outcome is written.
//
// `conveyor_job_queue_latency_seconds{queue}` is a histogram of the wait from a job's stream
// entry to the start of its attempt. The entry is made at its enqueue. For a delayed, retried or
// recovered job, it is made when the job was put in the stream, a few milliseconds after its due
// time. The entry's time is Redis's clock and the start the worker's: their skew adds to it.
//
// `conveyor_scheduler_promoted_total{queue}` counts delayed and retried jobs promoted by the
// worker's scheduler. `conveyor_scheduler_lag_seconds{queue}` is a histogram of how late the
// most overdue job of each promotion was.
//
// `conveyor_recovery_scans_total{queue}` counts recovery scans.
// `conveyor_recovered_jobs_total{queue,result}` counts recovered jobs, with result requeued or
// dead. `conveyor_recovery_lock_held{queue}` is 1 while the worker holds the queue's recovery
// lock, during a scan.
//
// `conveyor_schedule_ticks_total{schedule,result}` counts periodic schedules' ticks the worker's
// scheduler handled (pipeline.WorkerHooks.ScheduleTick, ScheduleMissed). The result is on_time
// or late: enqueued within 500 ms of the tick (the scheduler's takeover delay), or later. Or it
// is skipped or merged: more than a minute late, so dropped, or run as one job. The schedule label
// holds the first MaxScheduleLabels (100) schedules the worker saw, and ScheduleOther for the
// rest. Every worker runs a scheduler, and normally the one holding the schedules' lock
// enqueues: sum the series over workers.
//
// `conveyor_schedule_tick_delay_seconds` is a histogram of how long after its time each tick was
// enqueued.
//
// `conveyor_redis_errors_total{kind}` counts calls of the client that failed. The kind is
// "reply" for an error Redis answered (OOM, READONLY, LOADING, NOPERM, ...). It is "connection"
// for a call that did not reach Redis or got no answer.
//
// The type label holds the types of the worker's handlers. A job whose type no handler takes has
// TypeUnhandled, so a producer cannot make series without bound by sending types nobody handles.
// The label is empty for an unreadable stream entry.
//
// # The queues' series
//
// A QueueCollector reads the gauges and counters of every queue, or of the listed queues. It
// reads them through an Inspector and caches them for MaxAge. So a scrape costs at most one
// refresh, of a bounded number of Redis round trips. That holds however many queues there are,
// and however often one or more Prometheus servers scrape.
//
// `conveyor_queue_jobs{queue,state}` counts the jobs scheduled, queued, in_progress and dead
// now.
//
// `conveyor_queue_enqueued_total`, `conveyor_queue_completed_total`,
// `conveyor_queue_failed_total`, `conveyor_queue_retried_total`,
// `conveyor_queue_recovered_total` and `conveyor_queue_canceled_total`, each {queue}, are the
// queue's counters. Redis keeps them since the queue was created, shared by all its workers.
//
// `conveyor_queue_stats_age_seconds` says how old the reading served is.
// `conveyor_queue_stats_errors_total` counts refreshes that failed; the last reading is served
// meanwhile.
package metrics
