package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
)

// ProgressInterval is the least time between two progress writes of one job. A handler may
// call Job.Progress as often as it likes; Redis sees at most one write per interval. The
// attempt's last report comes on top, written when the handler returns.
const ProgressInterval = 250 * time.Millisecond

// MaxProgressMessage bounds a progress message, in bytes; Job.Progress cuts a longer one.
const MaxProgressMessage = jobstate.MaxProgressMessage

// progressFlushTimeout bounds a write made without the handler's context: a trailing write,
// and the last report written after the handler returned.
const progressFlushTimeout = 2 * time.Second

// ErrProgressRefused is returned by Job.Progress when the job moved on from the attempt that
// reports. It was canceled, recovered by another worker or put back on shutdown. Or the
// attempt ended: its handler returned, or ran past its timeout. Nothing was written; the
// handler's context ends soon, if it has not.
var ErrProgressRefused = errors.New("pipeline: progress refused: the job moved on from this attempt")

// Progress reports how far the handler got: percent from 0 to 100 and a short message (cut to
// MaxProgressMessage bytes, on one line). It is shown while the job runs by conveyor status,
// the dashboard and the HTTP API (the job's progress fields, and its events stream). A
// finished job keeps its last attempt's last report.
//
// Progress is cheap to call often: it writes at most once per ProgressInterval (250 ms) per
// job. A report made sooner is held, replacing any held before it. It is written when the
// interval ends, or when the handler returns, before the attempt's outcome. So the last
// report is never lost, and never lands after the outcome. Only a report written at once
// waits for Redis (and returns its error); a held one returns nil.
//
// The write is fenced like the worker's transitions. A handler whose job moved on (see
// ErrProgressRefused) never changes the progress of the attempt that runs now. Percent
// outside 0-100 is an error wrapping ErrInvalid. On a Job not handed to a handler by a Worker
// (a handler called by a test), Progress does nothing and returns nil.
func (j *Job) Progress(ctx context.Context, percent int, message string) error {
	if percent < 0 || percent > 100 {
		return fmt.Errorf("%w: progress %d%% is not from 0 to 100", ErrInvalid, percent)
	}
	if j.progress == nil {
		return nil
	}
	return j.progress.report(ctx, percent, jobstate.CutMessage(message))
}

// progressReporter writes one attempt's progress reports, at most one per ProgressInterval.
type progressReporter struct {
	w     *Worker
	q     *keys.Queue
	id    string
	entry string
	try   int

	mu      sync.Mutex
	last    time.Time     // when the last write started
	held    *heldReport   // the latest report not yet written
	timer   *time.Timer   // writes held at the interval's end
	writing chan struct{} // closed when the write in flight ends; nil when none is
	ended   bool          // the attempt ended: no more writes
	refused bool          // a write was refused: the job moved on
}

type heldReport struct {
	percent int
	message string
}

func (w *Worker) newProgressReporter(q *keys.Queue, j *Job) *progressReporter {
	return &progressReporter{w: w, q: q, id: j.ID, entry: j.Entry, try: j.Attempt}
}

func (r *progressReporter) report(ctx context.Context, percent int, message string) error {
	r.mu.Lock()
	if r.ended || r.refused {
		r.mu.Unlock()
		return ErrProgressRefused
	}
	now := time.Now()
	if r.writing == nil && now.Sub(r.last) >= ProgressInterval {
		r.held = nil // this one is newer
		r.startWrite(now)
		r.mu.Unlock()
		err := r.write(ctx, heldReport{percent, message})
		r.endWrite()
		return err
	}
	r.held = &heldReport{percent, message}
	if r.timer == nil {
		r.timer = time.AfterFunc(max(0, r.last.Add(ProgressInterval).Sub(now)), r.trail)
	}
	r.mu.Unlock()
	return nil
}

// startWrite marks a write in flight; the caller holds r.mu.
func (r *progressReporter) startWrite(now time.Time) {
	r.last = now
	r.writing = make(chan struct{})
}

func (r *progressReporter) endWrite() {
	r.mu.Lock()
	close(r.writing)
	r.writing = nil
	r.mu.Unlock()
}

// waitWrite waits until no write is in flight; the caller holds r.mu, which it holds again on
// return.
func (r *progressReporter) waitWrite() {
	for r.writing != nil {
		ch := r.writing
		r.mu.Unlock()
		<-ch
		r.mu.Lock()
	}
}

// trail writes the held report once the interval since the last write has passed (the timer).
func (r *progressReporter) trail() {
	r.mu.Lock()
	r.timer = nil
	r.waitWrite()
	if r.ended || r.refused || r.held == nil {
		r.mu.Unlock()
		return
	}
	if wait := time.Until(r.last.Add(ProgressInterval)); wait > 0 {
		// A write in flight when the timer fired started a new interval.
		r.timer = time.AfterFunc(wait, r.trail)
		r.mu.Unlock()
		return
	}
	h := *r.held
	r.held = nil
	r.startWrite(time.Now())
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), progressFlushTimeout)
	defer cancel()
	_ = r.write(ctx, h) // a failed trailing write is lost like a missed event: the next report writes again
	r.endWrite()
}

// end ends the attempt's reports before its outcome is written: no report is written after it
// returns. With flush, a held report is written first (the attempt's last); without (an
// abandoned attempt: the job moved on, or goes back on shutdown) it is dropped.
func (r *progressReporter) end(flush bool) {
	r.mu.Lock()
	r.ended = true
	if r.timer != nil {
		r.timer.Stop() // a trail already running sees ended
		r.timer = nil
	}
	r.waitWrite()
	h := r.held
	r.held = nil
	refused := r.refused
	r.mu.Unlock()
	if flush && h != nil && !refused {
		ctx, cancel := context.WithTimeout(context.Background(), progressFlushTimeout)
		defer cancel()
		_ = r.write(ctx, *h)
	}
}

// write runs progress.lua for one report.
func (r *progressReporter) write(ctx context.Context, h heldReport) error {
	row, err := r.w.store.WriteProgress(ctx, *r.q, jobstate.ProgressParams{ID: r.id, Entry: r.entry,
		Attempt: r.try, Percent: h.percent, Message: h.message, Events: r.w.store.Events(ctx)})
	if err != nil {
		return fmt.Errorf("progress %s/%s: %w", r.q.Name(), r.id, err)
	}
	switch row.Code {
	case script.OK:
		r.w.progressWrites.Add(1)
		return nil
	case script.Refused, script.NotFound:
		r.mu.Lock()
		r.refused = true
		r.mu.Unlock()
		if row.Data != "" {
			return fmt.Errorf("%w (it is %s)", ErrProgressRefused, row.Data)
		}
		return ErrProgressRefused
	}
	return fmt.Errorf("progress %s/%s: unexpected reply %v", r.q.Name(), r.id, row.Code)
}
