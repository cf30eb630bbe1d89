package jobstate

import (
	"time"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
)

// EnqueueCall is enqueueCall with no bound, as most tests publish.
func EnqueueCall(q keys.Queue, now time.Time, jobs []NewJob) script.Call {
	return enqueueCall(q, now, jobs, nil)
}

// FinishedAt is when t's attempt finished, to the millisecond finish.lua records.
func (t Transition) FinishedAt() time.Time { return time.UnixMilli(t.finished) }

// The call builders and reply readers, which callers reach through Batch and Store's methods
// only, stay open to this package's tests: they check a script's reply code by code.
var (
	EnqueueBoundedCall = enqueueCall
	EnqueueReply       = enqueueReply
	DebounceCall       = debounceCall
	DebounceReply      = debounceReply
	FinishCall         = finishCall
	FinishReply        = finishReply
	AdmitCall          = admitCall
	AdmitReply         = admitReply
	LeasesCall         = leasesCall
	LeasesReply        = leasesReply
	RunCalls           = runCalls
)
