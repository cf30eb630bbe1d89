// Package pipeline is Conveyor's public API: background jobs for Go on Redis Streams, with
// retries, delays, a dead set, and recovery of jobs whose worker died.
//
// A job is a typed payload published to a queue. It gets an id at once; its status and result
// can be read, or waited for, by that id. Workers run jobs through a Redis Stream consumer
// group with Watermill's router, so Watermill middleware ([Worker.Use]) wraps every job and
// sees its outcome.
//
// # The four types
//
//   - [Client] publishes jobs ([Client.Enqueue], [Client.EnqueueBatch], with options such as
//     [WithDelay], [WithMaxRetries], [WithUnique] and [WithID]), reads them ([Client.Get],
//     [Client.Stats]), waits for their end ([Client.Wait]) and cancels them ([Client.Cancel]).
//   - [Publisher] is the same publishing as a Watermill message.Publisher: a router or
//     Watermill's Forwarder publishes messages as jobs, the message UUID as the job id and the
//     job's type and options in conveyor_* metadata keys.
//   - [Worker] runs the handlers registered with [Worker.Handle] on its queues until its
//     context ends, then drains: running jobs finish, or are put back after the shutdown
//     timeout. Besides reading the queues it runs its background services: the scheduler
//     of delayed and retried jobs, a recoverer per queue, and the watcher of partition counts.
//   - [Inspector] is the admin API the CLI and the HTTP API are built on: every queue's gauges
//     and counters, jobs listed by status with cursors, replay and purge of dead jobs (with a
//     dry run), creating and deleting queues, and the doctor's checks of the Redis server.
//
// # The life of a job
//
// Enqueue checks its input and writes the job in one script: a job due now becomes an entry
// of the queue's stream (queued), a delayed one joins the queue's scheduled set (scheduled)
// until the worker's scheduler promotes it into the stream when due. A worker reads entries in
// batches, marks a job started (in_progress), runs its handler and writes the outcome, batched
// with other jobs' outcomes: completed, kept for its retention and then expired; scheduled
// again at the backoff's due time when the handler failed with retries left; failed, in the
// dead set until replayed or purged, when it failed for good ([SkipRetry]) or ran out of
// retries. A job whose worker stopped renewing its lease (a crash, a freeze, a cut network) is
// put back by another worker's recoverer after the visibility timeout, counting the lost
// attempt. A job's [Status] is one of scheduled, queued, in_progress, completed, failed and
// canceled; a final one is announced on the queue's events channel to whoever waits on the
// job, which wakes [Client.Wait] and the HTTP API's long polls without polling Redis.
//
// A job canceled while it runs ([Client.Cancel], from any process) has its handler's context
// cancelled within milliseconds, with cause [ErrJobCanceled]: its worker listens on the
// queue's events channel, and its lease renewal stands in for a missed message. The attempt
// ends canceled whatever the handler returns afterwards.
//
// # Guarantees
//
// Nothing accepted is lost while Redis keeps its data. Execution is at least once; state
// changes are exactly once: every transition a worker asks for is fenced by the stream entry
// it was handed, so a stale worker cannot overwrite a newer state. A job runs again only after
// its worker stopped renewing its lease, and a worker never holds more unfinished jobs than
// its concurrency, so a crash re-runs at most that many. Delayed jobs never start early. Input
// is refused before anything is written, with errors that wrap [ErrInvalid].
//
// # Further reading
//
// The repository's docs/ directory: STATE_MACHINE.md maps every status and the script of every
// transition; ARCHITECTURE.md the packages and how a job passes through them; RELIABILITY.md
// every fault tried and the test that tries it; OPERATIONS.md Redis settings, TLS, Cluster,
// partitions and tuning; API.md the HTTP API. The runnable examples of this package show each
// type in use.
package pipeline
