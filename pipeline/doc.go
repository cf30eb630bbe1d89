// Package pipeline is Conveyor's public API: background jobs for Go on Redis Streams. It has
// retries, delays, a dead set, and recovery of jobs whose worker died.
//
// A job is a typed payload published to a queue. It gets an id at once. Its status and result
// can be read, or waited for, by that id. Workers run jobs through a Redis Stream consumer
// group with Watermill's router. So Watermill middleware ([Worker.Use]) wraps every job and
// sees its outcome.
//
// # The four types
//
// A [Client] publishes jobs ([Client.Enqueue], [Client.EnqueueBatch]). Options such as
// [WithDelay], [WithMaxRetries], [WithUnique] and [WithID] shape a job. It reads jobs
// ([Client.Get], [Client.Stats]), waits for their end ([Client.Wait]) and cancels them
// ([Client.Cancel]).
//
// A [Publisher] is the same publishing as a Watermill message.Publisher. A router or Watermill's
// Forwarder publishes messages as jobs. The message UUID is the job id; the job's type and
// options travel in conveyor_* metadata keys.
//
// A [Worker] runs the handlers registered with [Worker.Handle] on its queues until its context
// ends. Then it drains: running jobs finish, or are put back after the shutdown timeout. It
// also runs background services. These are the scheduler of delayed and retried jobs, a
// recoverer per queue, and the watcher of partition counts.
//
// The [Inspector] is the admin API the CLI and the HTTP API are built on. It shows every
// queue's gauges and counters, and lists jobs by status with cursors. It replays and purges
// dead jobs (with a dry run). It creates and deletes queues. The checks of the Redis server
// are package doctor's.
//
// # The life of a job
//
// Enqueue checks its input and writes the job in one script. A job due now becomes an entry of
// the queue's stream (queued). A delayed one joins the queue's scheduled set (scheduled). The
// worker's scheduler promotes it into the stream when due.
//
// A worker reads entries in batches and marks a job started (in_progress). It runs the handler
// and writes the outcome, batched with other jobs' outcomes. A completed job is kept for its
// retention, then expires. A failed job with retries left is scheduled again at the backoff's
// due time. A job that failed for good ([SkipRetry]) or ran out of retries is failed. It stays
// in the dead set until replayed or purged.
//
// A worker may stop renewing a job's lease (a crash, a freeze, a cut network). Then another
// worker's recoverer puts the job back after the visibility timeout, counting the lost
// attempt.
//
// A job's status ([status.Status], package status) is one of scheduled, queued, in_progress,
// completed, failed and canceled. A final status is announced on the queue's events channel to
// whoever waits on the job. That wakes [Client.Wait] and the HTTP API's long polls without
// polling Redis.
//
// A job canceled while it runs ([Client.Cancel], from any process) has its handler's context
// cancelled within milliseconds. The cause is [ErrJobCanceled]. Its worker listens on the
// queue's events channel, and its lease renewal stands in for a missed message. The attempt
// ends canceled whatever the handler returns afterwards.
//
// # Guarantees
//
// Nothing accepted is lost while Redis keeps its data. Execution is at least once. State
// changes are exactly once: every transition a worker asks for is fenced by the stream entry
// it was handed. So a stale worker cannot overwrite a newer state. A job runs again only after
// its worker stopped renewing its lease. A worker never holds more unfinished jobs than its
// concurrency, so a crash re-runs at most that many. Delayed jobs never start early. Input is
// refused before anything is written, with errors that wrap [ErrInvalid].
//
// # Further reading
//
// The repository's docs/ directory has more. STATE_MACHINE.md maps every status and the script
// of every transition. ARCHITECTURE.md shows the packages and how a job passes through them.
// RELIABILITY.md lists every fault tried and the test that tries it. OPERATIONS.md covers Redis
// settings, TLS, Cluster, partitions and tuning. API.md describes the HTTP API. The runnable
// examples of this package show each type in use.
package pipeline
