// Package publish is the machinery behind pipeline.Client's publishes: the route cache (each
// queue's partition count and job defaults, read in one round trip and trusted for RouteTTL),
// the cache of known queues, the choice of a new job's partition, and the writes themselves,
// chunked and pipelined, sent again while a change of the partition count keeps a layout
// closed.
//
// Why a package apart. The public package pipeline should hold what users call. This is most
// of a publish's code, and none of it is API: it works on the store's values (jobstate.NewJob,
// keys.Queue, partition counts), never on a Job or an Option.
//
// Why it imports no pipeline. The arrow points one way, as internal/engine's does. pipeline
// prepares each job (its options, its checks, the Job it returns) and hands this package the
// NewJob. What the scripts answered comes back to pipeline job by job, in the order written,
// through the functions of Settle. pipeline turns those answers into its Job fields and its
// errors (ErrConflict) there. pipeline's public errors that this package's errors must wrap
// (ErrQueueBusy) come in through Config. A publish costs no allocation and no Redis command
// more than when this code was pipeline's.
//
// What stays in pipeline. Enqueue, EnqueueBatch and Workflow check and prepare their jobs,
// call a Publisher, and map its answers back. The Inspector changes layouts (CreateQueue,
// DeleteQueue, UpdateQueue): it calls Relayout so that this process's routes are read again.
package publish
