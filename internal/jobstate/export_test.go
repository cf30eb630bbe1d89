package jobstate

import "time"

// FinishedAt is when t's attempt finished, to the millisecond finish.lua records.
func (t Transition) FinishedAt() time.Time { return time.UnixMilli(t.finished) }
