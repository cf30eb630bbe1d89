package jobstate

import "time"

// FinishedAt is when t's attempt finished, to the millisecond finish.lua records.
func (t Transition) FinishedAt() time.Time { return time.UnixMilli(t.finished) }

// The call builders and reply readers, which callers reach through Batch and Store's methods
// only, stay open to this package's tests: they check a script's reply code by code.
var (
	EnqueueCall   = enqueueCall
	EnqueueReply  = enqueueReply
	DebounceCall  = debounceCall
	DebounceReply = debounceReply
	FinishCall    = finishCall
	FinishReply   = finishReply
	AdmitCall     = admitCall
	AdmitReply    = admitReply
	LeasesCall    = leasesCall
	LeasesReply   = leasesReply
	RunCalls      = runCalls
)
