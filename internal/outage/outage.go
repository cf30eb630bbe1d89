// Package outage paces what a component logs, and how often it retries, while Redis fails.
//
// # Model
//
// A Spell is one stretch of failing calls of one component. The component may be a stream reader
// or the delayed scheduler. Its first failure begins it. Every later failure that comes once the
// current wait has passed is a new backoff step, and the wait doubles, from Min up to Max.
//
// The component logs one line per step, saying the real wait (Step.Wait), however many of its
// calls fail within the step. When a call goes through again, it logs one line saying how long
// Redis was away (OK). Without it, a component that retries every few hundred milliseconds
// writes dozens of identical lines per outage.
//
// A Spell is safe for concurrent use: calls of one component on several goroutines share its
// steps.
package outage

import (
	"sync"
	"time"
)

// Spell tracks one component's stretch of failing calls; the zero Spell, with Min and Max
// set, has none.
type Spell struct {
	// Min is the wait after the first failure; it doubles with every step up to Max.
	Min, Max time.Duration

	mu    sync.Mutex
	since time.Time // zero while calls go through
	wait  time.Duration
	next  time.Time // when the current step's wait ends
	tries int       // steps so far
}

// Step is what Failed decided.
type Step struct {
	// Log is true when this failure begins a new step: log it, with Wait.
	Log bool
	// Wait is how long to wait before the next try.
	Wait time.Duration
	// Tries counts the steps of the spell so far (1 for its first failure).
	Tries int
	// FailingFor is how long the spell has lasted.
	FailingFor time.Duration
}

// Failed records a failed call at now.
func (s *Spell) Failed(now time.Time) Step {
	s.mu.Lock()
	defer s.mu.Unlock()
	begins := s.since.IsZero()
	step := begins || !now.Before(s.next)
	switch {
	case begins:
		s.since, s.wait = now, s.Min
	case step:
		s.wait = min(2*s.wait, s.Max)
	}
	if step {
		s.tries++
		s.next = now.Add(s.wait)
	}
	return Step{Log: step, Wait: s.next.Sub(now), Tries: s.tries, FailingFor: now.Sub(s.since)}
}

// OK records a call that went through at now. When it ends a spell, it returns how long the
// spell lasted (from its first failure) and true: log that Redis is back.
func (s *Spell) OK(now time.Time) (lasted time.Duration, ended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.since.IsZero() {
		return 0, false
	}
	lasted = now.Sub(s.since)
	s.since, s.tries, s.wait, s.next = time.Time{}, 0, 0, time.Time{}
	return lasted, true
}

// Failing reports whether a spell is under way.
func (s *Spell) Failing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.since.IsZero()
}

// Round rounds a duration for a log line: to the millisecond from a second up (took=2.501s),
// to the microsecond below (took=1.235ms, took=85µs).
func Round(d time.Duration) time.Duration {
	if d >= time.Second || d <= -time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}
