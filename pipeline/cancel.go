package pipeline

import "github.com/conveyorq/conveyor/internal/engine"

// ErrJobCanceled is the cause (context.Cause) of a handler's context when its job is canceled
// while it runs (Client.Cancel, Inspector.Cancel, `conveyor cancel`,
// DELETE /v1/queues/{queue}/jobs/{id}). The worker learns it from the queue's job events, in
// milliseconds. When the worker missed that event (its subscription was down), its next lease
// renewal finds the job's entry gone and the cause is stream.ErrLeaseLost instead. Either way
// the job stays canceled: whatever the handler returns afterwards is discarded, never retried
// nor failed.
var ErrJobCanceled = engine.ErrJobCanceled
