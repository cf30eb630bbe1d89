package status

// The outcomes of an attempt (pipeline.JobAttempt.Outcome), as plain strings: they are what the
// attempt history in the job's hash holds. The first four are recorded as the attempt ends,
// AttemptReplayed as a replay happens; the others are read from the job itself, for its last
// attempt. The store's scripts write the first five; internal/keys names them too
// (TestAttemptOutcomesAreTheStores).
const (
	// AttemptRetried: the handler failed and the job was scheduled to run again.
	AttemptRetried = "retry"
	// AttemptSnoozed: the handler asked to run later (Snooze, RetryAt); no attempt is counted.
	AttemptSnoozed = "snooze"
	// AttemptLost: the worker stopped renewing its lease (it died, or was cut off) and recovery
	// put the job back.
	AttemptLost = "lost"
	// AttemptFailed: the attempt failed the job for good (out of retries, SkipRetry, lost on the
	// last attempt). A person reads it as Dead (AttemptWord), as the job's status.
	AttemptFailed = "failed"
	// AttemptReplayed is no attempt but a mark in the history: the job was replayed from the
	// dead set then (StartedAt and EndedAt), its Number 0. The attempts after it count from 1
	// again, with a fresh set of retries.
	AttemptReplayed = "replayed"
	// AttemptCompleted: the handler returned without error.
	AttemptCompleted = "completed"
	// AttemptCanceled: the job was canceled while this attempt was its last.
	AttemptCanceled = "canceled"
	// AttemptRunning: the attempt runs now.
	AttemptRunning = "running"
)

// AttemptWord is how a person reads an attempt's outcome: Dead ("dead") for AttemptFailed, the
// attempt that sent the job to the dead set, as the job's status reads; the outcome itself
// otherwise. "failed" stays the outcome on the wire (JSON).
func AttemptWord(outcome string) string {
	if outcome == AttemptFailed {
		return Dead
	}
	return outcome
}
