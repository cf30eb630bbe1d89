// Package settings holds the rules of a change of a queue's settings that need no public type:
// the wire forms of pipeline.QueueSettings and pipeline.QueuePatch, a patch's checks, the part
// of a patch kept in the settings record, and the mapping of the store's errors. It works on
// neutral values so that pipeline keeps only its public types and the calls that apply a
// change. pipeline converts its QueuePatch to Patch (the fields are the same) and passes its
// error values in Bounds and StoreErr, so that the errors stay pipeline's.
package settings

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/publish"
)

// Patch is pipeline.QueuePatch field for field, so that either converts to the other.
type Patch struct {
	Paused       *bool
	Concurrency  *int
	Partitions   *int
	GroupWindow  *int
	GroupWeights map[string]int
	MaxRetries   *int
	Timeout      *time.Duration
	MaxWaiting   *int
	FullPolicy   *string
	// MaxWaitingPerKey is pipeline.QueuePatch's (publish.FieldMaxWaitingPerKey).
	MaxWaitingPerKey *int
}

// Bounds are a patch's limits, and the error its refusals wrap (pipeline.ErrInvalid).
type Bounds struct {
	MaxPartitions int
	MaxRetries    int
	MaxTimeout    time.Duration
	Invalid       error
}

func (b Bounds) invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", b.Invalid, fmt.Sprintf(format, args...))
}

// patchJSON is the wire form of QueuePatch (PATCH /v1/queues/{queue}/settings).
type patchJSON struct {
	Paused       *bool          `json:"paused"`
	Concurrency  *int           `json:"concurrency"`
	Partitions   *int           `json:"partitions"`
	GroupWindow  *int           `json:"group_window"`
	GroupWeights map[string]int `json:"group_weights"`
	MaxRetries   *int           `json:"max_retries"`
	TimeoutMS    *int64         `json:"timeout_ms"`
	MaxWaiting   *int           `json:"max_waiting"`
	FullPolicy   *string        `json:"full_policy"`
	// MaxWaitingPerKey is max_waiting_per_key.
	MaxWaitingPerKey *int `json:"max_waiting_per_key"`
}

// DecodePatch reads a patch's wire form, refusing fields it does not know: a misspelt field
// would otherwise change nothing and say nothing. Only the timeout is checked here.
func DecodePatch(b []byte, bounds Bounds) (Patch, error) {
	var w patchJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return Patch{}, err
	}
	p := Patch{Paused: w.Paused, Concurrency: w.Concurrency, Partitions: w.Partitions,
		GroupWindow: w.GroupWindow, GroupWeights: w.GroupWeights, MaxRetries: w.MaxRetries,
		MaxWaiting: w.MaxWaiting, FullPolicy: w.FullPolicy, MaxWaitingPerKey: w.MaxWaitingPerKey}
	if ms := w.TimeoutMS; ms != nil {
		// Checked before it is a Duration, which a large count of milliseconds would overflow.
		if *ms < 0 || *ms > bounds.MaxTimeout.Milliseconds() {
			return Patch{}, bounds.invalid("timeout_ms %d outside 0..%d", *ms, bounds.MaxTimeout.Milliseconds())
		}
		d := time.Duration(*ms) * time.Millisecond
		p.Timeout = &d
	}
	return p, nil
}

// Validate checks p as given, but for its group part (pipeline's GroupChange checks that).
func (p Patch) Validate(b Bounds) error {
	if p.Concurrency != nil && *p.Concurrency < 0 {
		return b.invalid("concurrency %d is negative", *p.Concurrency)
	}
	if p.Partitions != nil && (*p.Partitions < 1 || *p.Partitions > b.MaxPartitions) {
		return b.invalid("partitions %d outside 1..%d", *p.Partitions, b.MaxPartitions)
	}
	if p.MaxRetries != nil && (*p.MaxRetries < -1 || *p.MaxRetries > b.MaxRetries) {
		return b.invalid("max retries %d outside 0..%d (-1 removes the default)", *p.MaxRetries, b.MaxRetries)
	}
	if p.Timeout != nil && (*p.Timeout < 0 || *p.Timeout > b.MaxTimeout) {
		return b.invalid("timeout %v outside 0..%v (0 removes the default)", *p.Timeout, b.MaxTimeout)
	}
	if p.MaxWaiting != nil && (*p.MaxWaiting < 0 || *p.MaxWaiting > publish.MaxBound) {
		return b.invalid("max waiting %d outside 0..%d (0 removes the bound)", *p.MaxWaiting, publish.MaxBound)
	}
	if p.MaxWaitingPerKey != nil && (*p.MaxWaitingPerKey < 0 || *p.MaxWaitingPerKey > publish.MaxBound) {
		return b.invalid("max waiting per key %d outside 0..%d (0 removes the bound)", *p.MaxWaitingPerKey, publish.MaxBound)
	}
	if p.FullPolicy != nil && *p.FullPolicy != publish.PolicyReject && *p.FullPolicy != publish.PolicyDropOldest {
		return b.invalid("full policy %q: want %s or %s", *p.FullPolicy, publish.PolicyReject, publish.PolicyDropOldest)
	}
	return nil
}

// RecordChange is the part of p kept in the settings record, and whether there is one.
func (p Patch) RecordChange() (jobstate.SettingsChange, bool) {
	c := jobstate.SettingsChange{Set: map[string]string{}}
	if n := p.MaxRetries; n != nil && *n >= 0 {
		c.Set[publish.FieldMaxRetries] = strconv.Itoa(*n)
	} else if n != nil {
		c.Delete = append(c.Delete, publish.FieldMaxRetries)
	}
	if d := p.Timeout; d != nil && *d > 0 {
		// Whole milliseconds, at least one: a shorter timeout must not become none.
		c.Set[publish.FieldTimeout] = strconv.FormatInt(max(1, d.Milliseconds()), 10)
	} else if d != nil {
		c.Delete = append(c.Delete, publish.FieldTimeout)
	}
	if n := p.MaxWaiting; n != nil && *n > 0 {
		c.Set[publish.FieldMaxWaiting] = strconv.Itoa(*n)
	} else if n != nil {
		c.Delete = append(c.Delete, publish.FieldMaxWaiting)
	}
	if n := p.MaxWaitingPerKey; n != nil && *n > 0 {
		c.Set[publish.FieldMaxWaitingPerKey] = strconv.Itoa(*n)
	} else if n != nil {
		c.Delete = append(c.Delete, publish.FieldMaxWaitingPerKey)
	}
	if f := p.FullPolicy; f != nil && *f == publish.PolicyDropOldest {
		c.Set[publish.FieldFullPolicy] = *f
	} else if f != nil {
		// reject is the default: no field.
		c.Delete = append(c.Delete, publish.FieldFullPolicy)
	}
	return c, len(c.Set)+len(c.Delete) > 0
}

// PauseOnly reports whether p changes nothing but the pause.
func (p Patch) PauseOnly() bool {
	p.Paused = nil
	return reflect.DeepEqual(p, Patch{})
}

// Settings is the wire form of pipeline.QueueSettings: the HTTP API's and `conveyor queues
// set --json`'s. Its limits have the fields of the limits routes.
type Settings struct {
	Queue            string         `json:"queue"`
	Revision         int64          `json:"revision"`
	Paused           bool           `json:"paused"`
	Partitions       int            `json:"partitions"`
	Limits           []Limit        `json:"limits"`
	GroupWindow      int            `json:"group_window"`
	GroupWeights     map[string]int `json:"group_weights"`
	Levels           []int          `json:"levels"`
	MaxRetries       *int           `json:"max_retries"`
	TimeoutMS        int64          `json:"timeout_ms"`
	MaxWaiting       int            `json:"max_waiting"`
	FullPolicy       string         `json:"full_policy"`
	MaxWaitingPerKey int            `json:"max_waiting_per_key"`
	PauseUnconfirmed []string       `json:"pause_unconfirmed,omitempty"`
}

// Limit is a limit's wire form, durations in milliseconds.
type Limit struct {
	Queue       string `json:"queue"`
	Type        string `json:"type"`
	PerKey      bool   `json:"per_key"`
	Rate        int    `json:"rate"`
	IntervalMS  int64  `json:"interval_ms"`
	Concurrency int    `json:"concurrency"`
}

// StoreErr gives an error of the store's queue changes (jobstate.ErrBusy, ErrRefused) the
// caller's sentinel in place of the store's (busy, invalid), in its text and for errors.Is.
func StoreErr(err, busy, invalid error) error {
	for _, m := range []struct{ from, to error }{{jobstate.ErrBusy, busy}, {jobstate.ErrRefused, invalid}} {
		if errors.Is(err, m.from) {
			return &mappedErr{err: err, from: m.from, to: m.to}
		}
	}
	return err
}

// mappedErr is an error whose store sentinel stands replaced by the caller's (StoreErr).
type mappedErr struct{ err, from, to error }

func (e *mappedErr) Error() string {
	return strings.Replace(e.err.Error(), e.from.Error(), e.to.Error(), 1)
}

func (e *mappedErr) Unwrap() []error { return []error{e.to, e.err} }
