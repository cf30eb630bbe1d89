package pipeline

import (
	"sync"
	"time"

	"github.com/conveyorq/conveyor/internal/engine"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/stream"
)

// Attempt is one ended attempt of a job, as WorkerHooks.Attempts tells it: what a middleware
// around the whole job would see come back (see Worker.Use), once per attempt. Some outcomes
// the worker writes (completed, retry, dead). Such an attempt is told when the chunk that
// carries it was written. An attempt that ends without a write (canceled, lost, abandoned) is
// told when it ends.
type Attempt struct {
	// Queue is the user's queue name (a partition's attempts report under their queue).
	Queue string
	// Type is the job's type; empty for an unreadable stream entry.
	Type string
	// Outcome is what became of the attempt; 0 when it completed.
	Outcome Outcome
	// NoHandler: the worker has no handler for Type, which failed the attempt.
	NoHandler bool
	// Refused: a middleware refused the job before its handler ran (see Worker.Use); the
	// attempt was written as a failed one, which Outcome tells.
	Refused bool
	// Began is when the worker began handling the attempt; Took is how long from then until
	// its outcome was written (or, without a write, known).
	Began time.Time
	Took  time.Duration
	// Entered is the time of the job's stream entry (Redis's clock): its enqueue, or its
	// promotion when it was due. Zero when the entry id carries none.
	Entered time.Time
	// ID is the job's id and Number the attempt's (Job.Attempt as its handler saw it).
	ID     string
	Number int
	// Stored: Redis stored this outcome (finish.lua answered OK, or turned a retry without
	// retries left into a death). It is false for an outcome it refused because the job had
	// moved on (recovered, canceled or finished elsewhere: fencing). It is false too for one
	// never written (a canceled, lost or abandoned attempt, or one given up at shutdown). The
	// torture suite's ledger records it as the commit of the outcome.
	Stored bool
}

// Notes of a transition (jobstate.Transition.Note) for its Attempt.
const (
	noteNoHandler = engine.NoteNoHandler
	noteRefused   = engine.NoteRefused
)

// attempts tells a WorkerHooks.Attempts hook about transitions, reusing the slices it lends.
type attempts struct {
	hook func([]Attempt)
	bufs sync.Pool // *[]Attempt
}

func newAttempts(hook func([]Attempt)) *attempts {
	if hook == nil {
		return nil
	}
	return &attempts{hook: hook}
}

// written tells the hook about the outcomes among ts that ended at at. The ts may hold start
// marks, which are no outcome. The codes are finish.lua's answers to ts (nil: none, the
// outcomes were given up). A middleware's refusal that finish.lua refused in turn is not told.
// Such a refusal is mostly a middleware that replaced the error of a handler that ran. That
// handler's own outcome was written and told already.
func (r *attempts) written(ts []transition, codes []script.Code, at time.Time) {
	if r == nil {
		return
	}
	p, _ := r.bufs.Get().(*[]Attempt)
	if p == nil {
		p = new([]Attempt)
	}
	out := (*p)[:0]
	for i := range ts {
		t := &ts[i]
		if t.Op == jobstate.OpStart || t.Note == noteRefused && codes != nil && codes[i] == script.Refused {
			continue
		}
		a := Attempt{Queue: t.Queue.Name(), Type: t.Type, NoHandler: t.Note == noteNoHandler,
			Refused: t.Note == noteRefused, Began: t.Began, Took: at.Sub(t.Began), Entered: stream.EntryTime(t.Entry),
			ID: t.ID, Number: t.Attempt, Stored: codes != nil && (codes[i] == script.OK || codes[i] == script.Died)}
		switch t.Op {
		case jobstate.OpRetry:
			a.Outcome = OutcomeRetry
			if codes != nil && codes[i] == script.Died { // no retry left by the job's count (a lost attempt counted meanwhile)
				a.Outcome = OutcomeDead
			}
		case jobstate.OpSnooze:
			a.Outcome = OutcomeSnoozed
		case jobstate.OpDead, jobstate.OpPoison:
			a.Outcome = OutcomeDead
		}
		out = append(out, a)
	}
	if len(out) > 0 {
		r.hook(out)
	}
	*p = out // its strings stay until the next chunk: a chunk's worth of type names at most
	r.bufs.Put(p)
}

// ended tells the hook about one attempt that ended without a write.
func (r *attempts) ended(a Attempt) {
	if r != nil {
		r.hook([]Attempt{a})
	}
}
