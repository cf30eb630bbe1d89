package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
)

// ProgressInterval bounds how often a job's progress is written (pipeline's Job.Progress).
const ProgressInterval = 250 * time.Millisecond

// progressFlushTimeout bounds a write made without the handler's context: a trailing write,
// and the last report written after the handler returned.
const progressFlushTimeout = 2 * time.Second

// ErrProgressRefused is the error of a progress report of an attempt the job moved on from;
// package pipeline exports it.
var ErrProgressRefused = errors.New("pipeline: progress refused: the job moved on from this attempt")

// ProgressReporter writes one attempt's progress reports, at most one per ProgressInterval,
// and holds the lines its handler logs until its outcome (logs.go). Every attempt a handler
// runs has one, its own allocation, so the lines cost a job that logs nothing no more.
type ProgressReporter struct {
	store  jobstate.Backend
	writes *atomic.Int64 // the worker's count of reports written, for tests
	q      *keys.Queue
	id     string
	entry  string
	try    int
	// seal, when set, seals the lines of each write of them (Loop.SealLogs).
	seal func(id string, lines []byte) []byte

	mu      sync.Mutex
	last    time.Time     // when the last write started
	held    *heldReport   // the latest report not yet written
	timer   *time.Timer   // writes held at the interval's end
	writing chan struct{} // closed when the write in flight ends; nil when none is
	ended   bool          // the attempt ended: no more writes
	refused bool          // a write was refused: the job moved on
	// logs are the lines the attempt's handler logged (logs.go); nil until the first.
	logs *attemptLogs
}

type heldReport struct {
	percent int
	message string
}

// Report writes a report now, or holds it for the interval's end (pipeline's Job.Progress).
func (r *ProgressReporter) Report(ctx context.Context, percent int, message string) error {
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
func (r *ProgressReporter) startWrite(now time.Time) {
	r.last = now
	r.writing = make(chan struct{})
}

func (r *ProgressReporter) endWrite() {
	r.mu.Lock()
	close(r.writing)
	r.writing = nil
	r.mu.Unlock()
}

// waitWrite waits until no write is in flight; the caller holds r.mu, which it holds again on
// return.
func (r *ProgressReporter) waitWrite() {
	for r.writing != nil {
		ch := r.writing
		r.mu.Unlock()
		<-ch
		r.mu.Lock()
	}
}

// trail writes the held report once the interval since the last write has passed (the timer).
func (r *ProgressReporter) trail() {
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

// End ends the attempt's reports before its outcome is written: no report is written after it
// returns. With flush, a held report is written first (the attempt's last); without (an
// abandoned attempt: the job moved on, or goes back on shutdown) it is dropped.
func (r *ProgressReporter) End(flush bool) {
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
func (r *ProgressReporter) write(ctx context.Context, h heldReport) error {
	logs := r.logsToReport()
	row, err := r.store.WriteProgress(ctx, *r.q, jobstate.ProgressParams{ID: r.id, Entry: r.entry,
		Attempt: r.try, Percent: h.percent, Message: h.message, Events: r.store.Events(ctx), Logs: logs})
	if err != nil {
		if logs != "" {
			r.mu.Lock()
			if r.logs != nil {
				r.logs.fresh = true // the next report sends them again
			}
			r.mu.Unlock()
		}
		return fmt.Errorf("progress %s/%s: %w", r.q.Name(), r.id, err)
	}
	switch row.Code {
	case script.OK:
		r.writes.Add(1)
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

// Store and Queue are what the reporter writes through and to: pipeline's Job.Dependencies
// reads through them, as only a job handed to a handler has a reporter.
func (r *ProgressReporter) Store() jobstate.Backend { return r.store }

// Queue is the partition (at the level it was read from) of the reporter's job.
func (r *ProgressReporter) Queue() *keys.Queue { return r.q }
