package engine

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/outage"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/tracing"
	"github.com/conveyorq/conveyor/metakey"
	"github.com/conveyorq/conveyor/status"
	"github.com/conveyorq/conveyor/stream"
)

// Metadata keys the worker's unmarshaller adds to each Watermill message, beside the job's own
// metadata (whose keys may not start with '_'). Watermill middleware can read them.
const (
	// MetaJob holds the entry's job field, "<attempt> <max_retries> <timeout_ms> <type>".
	MetaJob = "_conveyor_job"
	// MetaType holds the job's type (public as metakey.EntryType).
	MetaType = metakey.EntryType
	// MetaForeign marks a message from an entry of another Watermill publisher (no conveyor
	// field, no job record yet). The worker adopts it as a job before its handler runs. Its
	// value is what adopting it takes (Adoption).
	MetaForeign = "_conveyor_foreign"
	// MetaLimitKey holds the job's limit key, from its entry, when it has one: admission holds
	// the job to its per-key limits by it.
	MetaLimitKey = "_conveyor_limit_key"
)

// maxErrorBytes bounds the error text a failed attempt stores. sendBackBytes bounds the
// payloads a worker sends back with a job's outcome. The finish script then need not read the
// stream entry again; larger ones are read in Redis.
const (
	maxErrorBytes = 4 << 10
	sendBackBytes = 8 << 10
)

// Handler is the job's public side of the loop, which pipeline gives it: it makes a message
// into a job and runs its handler, says what a handler's error asks for, and turns what the
// attempt came to into what the middleware gets. Its methods run on the job's goroutine.
type Handler interface {
	// Begin makes the job of msg, read from q, and returns the attempt's context (traced) and
	// its Attempt, which the job holds. Attempt.Fail is set when no handler can run it.
	Begin(ctx context.Context, q *keys.Queue, msg *message.Message) (context.Context, *Attempt)
	// Call runs the attempt's handler.
	Call(ctx context.Context, a *Attempt) ([]byte, error)
	// Classify says what a handler's error asks for: Retry, Dead or Snooze (then until when,
	// for an attempt that ended at end).
	Classify(err error, end time.Time) (Verdict, time.Time)
	// End returns what the middleware gets of the attempt's end e (nil: completed). a is nil
	// for an unreadable entry.
	End(a *Attempt, e Ended) error
	// Ours reports whether err is one End returned.
	Ours(err error) bool
}

// Attempt is one attempt of a job, as the loop needs it. The job holds it, so it costs no
// allocation of its own.
type Attempt struct {
	Q               *keys.Queue
	Queue           string // the user's queue name (Q.Name())
	ID, Entry, Type string
	Number          int // the attempt's number
	MaxRetries      int
	Timeout         time.Duration
	Metadata        map[string]string // the job's own
	// Values are the stream entry's fields as read (stream.EntryValues).
	Values   map[string]any
	Start    time.Time
	Progress *ProgressReporter
	mark     StartMark // its "started" mark, while the completer may write it
	// Fail is the error of an attempt no handler can run (pipeline's ErrNoHandler), or whose
	// payload does not open; FailNote is its transition's Note (NoteNoHandler when zero).
	Fail     error
	FailNote uint8
	// Job and Trace are the Handler's: its job and the attempt's span.
	Job, Trace any
}

// Verdict is what a handler's error asks for.
type Verdict uint8

// The verdicts of Handler.Classify.
const (
	Retry Verdict = iota
	Dead
	Snooze
)

// Outcome is what became of an attempt that did not complete; pipeline.Outcome's values.
type Outcome uint8

// The outcomes, as pipeline numbers them.
const (
	OutcomeRetry Outcome = iota + 1
	OutcomeDead
	OutcomeCanceled
	OutcomeLost
	OutcomeAbandoned
	OutcomeSnoozed
)

// Ended is what an attempt came to: Outcome 0 when it completed.
type Ended struct {
	Outcome Outcome
	Timeout bool      // it ran past the job's timeout
	RetryAt time.Time // for OutcomeRetry and OutcomeSnoozed
	Err     error     // the handler's error, or the reason the worker gave up
}

// Notes of a transition (jobstate.Transition.Note) for the attempts hook.
const (
	NoteNoHandler uint8 = 1 + iota
	NoteRefused
	// NoteSealed: the job's payload did not open (a key the worker lacks), so no handler ran.
	NoteSealed
)

// ErrTimeout is the cause of a handler context whose job ran past its timeout.
var ErrTimeout = errors.New("attempt timed out")

// handle runs one job. It returns once the job's outcome is written: what Handler.End makes
// of it. Then settleAfter frees the slot. The entry is acknowledged by finish.lua together
// with the state change.
func (l *Loop) handle(msg *message.Message) error {
	q, ok := l.queue(msg.Metadata[stream.StreamKey])
	if !ok {
		l.Log.Error().Str("stream", msg.Metadata[stream.StreamKey]).Str("job_id", msg.UUID).Msg("message from an unknown stream")
		return nil
	}
	if reason, bad := msg.Metadata[stream.PoisonKey]; bad {
		return l.Handler.End(nil, l.poison(q, msg, reason))
	}
	ctx, a := l.Handler.Begin(msg.Context(), q, msg)
	if a.Fail != nil {
		// An attempt like any other, retried with backoff. During a rolling deploy a worker of
		// the old version must not kill jobs meant for the new one, which may pick the retry
		// up. It goes to the dead set only after its retries.
		a.Start = l.Now()
		note := a.FailNote
		if note == 0 {
			note = NoteNoHandler
		}
		return l.Handler.End(a, l.outcome(ctx, a, a.Start, nil, a.Fail, note))
	}
	a.Start = l.Now()
	a.mark = StartMark{Q: q, ID: a.ID, Entry: a.Entry, Attempt: a.Number, At: a.Start.UnixMilli()}
	l.comp.Started(&a.mark)
	// Its own allocation: held by value, its mutex would make pipeline.Job, which holds the
	// Attempt, a value go vet forbids copying.
	a.Progress = &ProgressReporter{store: l.Store, writes: &l.ProgressWrites, q: q, id: a.ID, entry: a.Entry, try: a.Number, seal: l.SealLogs}
	var result []byte
	var err error
	if a.Timeout > 0 {
		result, err = l.executeWithTimeout(ctx, a)
	} else {
		result, err = l.call(ctx, a)
	}
	endProgress(ctx, a.Progress)
	return l.Handler.End(a, l.outcome(ctx, a, a.Start, result, err, 0))
}

// endProgress ends the attempt's progress reports before its outcome is written. It writes
// the last one held, unless the attempt was abandoned (the job moved on, or goes back on
// shutdown). Then the fence would refuse it, or the next run reports its own.
func endProgress(ctx context.Context, r *ProgressReporter) {
	cause := context.Cause(ctx)
	r.End(!errors.Is(cause, stream.ErrClosed) && !errors.Is(cause, stream.ErrLeaseLost))
}

// sendBack adds to t the payload exactly as read from the job's entry (stream.EntryValues).
// It does so when the payload is small and the entry has no metadata, so that finish.lua need
// not read the entry again. Never the job's Payload: middleware and handlers may change that
// slice in place, and the job's next attempt must run on the bytes that were published.
func sendBack(t jobstate.Transition, a *Attempt) jobstate.Transition {
	if a.Values != nil {
		p, _ := a.Values[keys.EntryPayload].(string)
		md, _ := a.Values[keys.EntryMetadata].(string)
		if md == "" && len(p) <= sendBackBytes {
			return t.WithPayload(p)
		}
	}
	return t
}

// refused writes a failed attempt for a job that a middleware refused before its handler ran.
func (l *Loop) refused(msg *message.Message, err error) {
	q, ok := l.queue(msg.Metadata[stream.StreamKey])
	if !ok || msg.Metadata[stream.PoisonKey] != "" {
		return
	}
	number, maxRetries, timeout, typ, _ := keys.ParseEntryJob(msg.Metadata[MetaJob])
	a := &Attempt{Q: q, Queue: q.Name(), ID: msg.UUID, Entry: msg.Metadata[stream.EntryIDKey], Type: typ,
		Number: number, MaxRetries: maxRetries, Timeout: time.Duration(timeout) * time.Millisecond}
	jobEvent(l.Log.Warn().Err(err), a).Msg("a middleware refused the job; counted as a failed attempt")
	a.Start = l.Now()
	_ = l.Handler.End(a, l.outcome(msg.Context(), a, a.Start, nil, fmt.Errorf("refused by middleware: %w", err), NoteRefused))
}

// outcome writes what the attempt came to and returns it; an abandoned attempt writes
// nothing. note is the transition's Note, for the hooks.
func (l *Loop) outcome(ctx context.Context, a *Attempt, start time.Time, result []byte, err error, note uint8) Ended {
	if cause := context.Cause(ctx); cause != nil {
		// A canceled job's attempt ends canceled whatever its handler returned. A handler
		// that ignored its context may return a result, or an error, late. The job's record
		// says canceled already, and fencing would refuse any write.
		var why Outcome
		switch {
		case errors.Is(cause, ErrJobCanceled):
			why = OutcomeCanceled
		case errors.Is(cause, stream.ErrLeaseLost):
			// On a lost lease the job was canceled (its event missed), or another worker
			// owns it now. A result returned anyway is written in the second case only, for
			// fencing to judge.
			if lost := l.lostWhy(a); err != nil || lost == OutcomeCanceled {
				why = lost
			}
		case errors.Is(cause, stream.ErrClosed) && err != nil:
			// Abandoned, not failed: on shutdown the entry is put back.
			why = OutcomeAbandoned
		}
		if why != 0 {
			return l.ended(a, why)
		}
	}
	end := l.Now()
	ran := jobstate.Ran{ID: a.ID, Entry: a.Entry, Attempt: a.Number, Started: start, Finished: end}
	var t jobstate.Transition
	var e Ended
	switch {
	case err == nil && len(result) > l.MaxResultBytes:
		reason := fmt.Sprintf("result of %d bytes exceeds the limit of %d", len(result), l.MaxResultBytes)
		t = jobstate.Dead(a.Q, jobstate.DeadParams{Ran: ran, Reason: reason})
		e = Ended{Outcome: OutcomeDead, Err: errors.New(reason)}
		jobEvent(l.Log.Warn(), a).Str("reason", reason).Msg("job failed for good; sent to the dead set")
	case err == nil:
		if l.SealResult != nil {
			result = l.SealResult(a, result)
		}
		t = jobstate.Done(a.Q, jobstate.DoneParams{Ran: ran, Result: string(result), Traceparent: doneTrace(ctx, a)})
		jobEvent(l.Log.Debug(), a).Dur("took", outage.Round(end.Sub(start))).Msg("job done")
	default:
		switch v, at := l.Handler.Classify(err, end); {
		case v == Snooze:
			t = jobstate.Snooze(a.Q, jobstate.SnoozeParams{Ran: ran, RunAt: at, Max: l.MaxSnoozes})
			e = Ended{Outcome: OutcomeSnoozed, Err: err, RetryAt: at}
			jobEvent(l.Log.Debug(), a).Time("run_at", at).Msg("job snoozed")
		case v == Dead || a.Number > a.MaxRetries:
			t = jobstate.Dead(a.Q, jobstate.DeadParams{Ran: ran, Reason: truncate(err.Error(), maxErrorBytes)})
			e = Ended{Outcome: OutcomeDead, Err: err}
			jobEvent(l.Log.Warn().Err(err), a).Msg("job failed for good; sent to the dead set")
		default:
			delay := l.Delay(a.Number)
			retryAt := time.UnixMilli(end.Add(delay).UnixMilli() + 1) // +1: never before the backoff ends
			t = jobstate.Retry(a.Q, jobstate.RetryParams{Ran: ran, Reason: truncate(err.Error(), maxErrorBytes), RetryAt: retryAt})
			e = Ended{Outcome: OutcomeRetry, Err: err, RetryAt: retryAt}
			jobEvent(l.Log.Info().Err(err), a).Dur("retry_in", delay.Round(time.Millisecond)).
				Msg("job attempt failed; will retry")
		}
	}
	t = sendBack(t, a)
	// The lines logged up to now go with the outcome. A handler that ignored its timeout and
	// logs on loses what it logs later.
	t.Logs = a.Progress.TakeLogs()
	t.Type, t.Began, t.Note = a.Type, start, note
	if e.Outcome != 0 {
		e.Timeout = errors.Is(context.Cause(ctx), ErrTimeout) || errors.Is(err, ErrTimeout)
	}
	<-l.comp.Finish(t, &a.mark)
	return e
}

// doneTrace is the traceparent a completed attempt hands to finish.lua: its process span's,
// which a workflow's task keeps for the spans of the tasks waiting for it. Only a traced job
// has one; for the others it costs a map lookup.
func doneTrace(ctx context.Context, a *Attempt) string {
	if a.Metadata[tracing.KeyTraceparent] == "" {
		return ""
	}
	return tracing.Traceparent(ctx)
}

// ended records an attempt that writes nothing: canceled, lost or abandoned.
func (l *Loop) ended(a *Attempt, why Outcome) Ended {
	l.comp.Forget(&a.mark)
	msg := "job attempt abandoned"
	if why == OutcomeCanceled {
		msg = "job canceled while it ran; its outcome is discarded"
	}
	jobEvent(l.Log.Info(), a).Stringer("outcome", why).Msg(msg)
	return Ended{Outcome: why}
}

// String is pipeline.Outcome's word for o.
func (o Outcome) String() string {
	switch o {
	case OutcomeRetry:
		return "retry"
	case OutcomeDead:
		return "dead"
	case OutcomeCanceled:
		return "canceled"
	case OutcomeLost:
		return "lost"
	case OutcomeAbandoned:
		return "abandoned"
	case OutcomeSnoozed:
		return "snoozed"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// lostWhy tells a job canceled while it ran from one recovered elsewhere, for the record.
func (l *Loop) lostWhy(a *Attempt) Outcome {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if st, err := l.Store.Status(ctx, *a.Q, a.ID); err == nil && status.Status(st) == status.Canceled {
		return OutcomeCanceled
	}
	return OutcomeLost
}

// executeWithTimeout runs the handler with the job's timeout, turning a panic into an error. It
// runs the handler in its own goroutine so that a handler ignoring its context cannot keep the
// slot past the timeout.
func (l *Loop) executeWithTimeout(ctx context.Context, a *Attempt) ([]byte, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, a.Timeout, ErrTimeout)
	defer cancel()
	type outcome struct {
		res []byte
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := l.call(ctx, a)
		done <- outcome{res, err}
	}()
	var o outcome
	select {
	case o = <-done:
	case <-ctx.Done():
		select {
		case o = <-done:
		case <-time.After(100 * time.Millisecond):
			if !errors.Is(context.Cause(ctx), ErrTimeout) {
				return nil, context.Cause(ctx)
			}
			jobEvent(l.Log.Warn(), a).Dur("timeout", a.Timeout).Msg("handler ignored its timeout; abandoning it")
			return nil, fmt.Errorf("%w after %s (the handler did not return)", ErrTimeout, a.Timeout)
		}
	}
	if o.err != nil && errors.Is(context.Cause(ctx), ErrTimeout) {
		return nil, fmt.Errorf("%w after %s: %w", ErrTimeout, a.Timeout, o.err)
	}
	return o.res, o.err
}

// call runs the handler, turning a panic into an error (a failed attempt, never a crash).
func (l *Loop) call(ctx context.Context, a *Attempt) (res []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			jobEvent(l.Log.Error(), a).Interface("panic", p).
				Str("stack", string(debug.Stack())).Msg("handler panicked")
			res, err = nil, fmt.Errorf("panic: %v", p)
		}
	}()
	return l.Handler.Call(ctx, a)
}

// Adoption is what adopting a message of another publisher takes besides its job field: its
// due time and unique key. The unmarshaller writes it into MetaForeign (String), for adopt.
type Adoption struct {
	RunAt     int64 // unix ms; 0 for none
	UniqueTTL int64 // ms; 0 without a unique key
	UniqueKey string
}

// String is a as MetaForeign carries it: "<run_at ms> <unique ttl ms> <unique key>".
func (a Adoption) String() string {
	return strconv.FormatInt(a.RunAt, 10) + " " + strconv.FormatInt(a.UniqueTTL, 10) + " " + a.UniqueKey
}

// ParseAdoption reads what Adoption.String wrote.
func ParseAdoption(s string) Adoption {
	f := strings.SplitN(s, " ", 3)
	var a Adoption
	if len(f) == 3 {
		a.RunAt, _ = strconv.ParseInt(f[0], 10, 64)
		a.UniqueTTL, _ = strconv.ParseInt(f[1], 10, 64)
		a.UniqueKey = f[2]
	}
	return a
}

// due is the adoption's due time; zero when it has none.
func (a Adoption) due() time.Time {
	if a.RunAt == 0 {
		return time.Time{}
	}
	return time.UnixMilli(a.RunAt)
}

// adopt makes a job of an entry of another Watermill publisher before the middleware and its
// handler run. It reports whether the job is to run now. A message that names a job on
// another entry is marked to be kept as a dead record of its own (stream.PoisonKey). It runs
// on to handle, which writes it. When Redis cannot be asked, the entry stays pending,
// unrenewed once settled, and recovery puts it back for another try.
func (l *Loop) adopt(msg *message.Message) bool {
	md := msg.Metadata
	q, ok := l.queue(md[stream.StreamKey])
	if !ok {
		return true // handle logs it
	}
	_, maxRetries, timeout, typ, _ := keys.ParseEntryJob(md[MetaJob])
	a := ParseAdoption(md[MetaForeign])
	entry := md[stream.EntryIDKey]
	ctx, cancel := context.WithTimeout(msg.Context(), 10*time.Second)
	defer cancel()
	res, err := l.Store.Adopt(ctx, *q, jobstate.AdoptParams{Job: jobstate.Foreign{ID: msg.UUID, Entry: entry, Type: typ,
		MaxRetries: maxRetries, Timeout: time.Duration(timeout) * time.Millisecond, CreatedAt: stream.EntryTime(entry),
		RunAt: a.due(), UniqueKey: a.UniqueKey, UniqueTTL: time.Duration(a.UniqueTTL) * time.Millisecond},
		Now: l.Now(), Worker: l.Name})
	log := func(e *zerolog.Event) *zerolog.Event {
		return e.Str("queue", q.Name()).Str("job_id", msg.UUID).Str("type", typ).Str("entry", entry)
	}
	switch {
	case err != nil:
		log(l.Log.Error().Err(err)).Msg("could not adopt a message of another publisher; it will be tried again after the visibility timeout")
		return false
	case res.Code == script.Refused:
		md[stream.PoisonKey] = fmt.Sprintf("stream entry %s of another publisher names job %s, which lives on another entry", entry, msg.UUID)
		return true
	case res.Code == script.UniqueHeld:
		log(l.Log.Info()).Str("unique_key", a.UniqueKey).Str("holder", res.Holder).
			Msg("refused a message of another publisher as a duplicate: another job holds its unique key")
		return false
	case res.Scheduled:
		log(l.Log.Debug()).Time("run_at", time.UnixMilli(a.RunAt)).Msg("adopted a message of another publisher as a scheduled job")
		return false
	}
	log(l.Log.Debug()).Msg("adopted a message of another publisher as a job")
	return true
}

// poison sends an unreadable entry to the dead set.
func (l *Loop) poison(q *keys.Queue, msg *message.Message, reason string) Ended {
	entry := msg.Metadata[stream.EntryIDKey]
	id := msg.UUID
	if !keys.ValidID(id) {
		id = jobstate.DeadEntryPrefix + entry
	}
	began := l.Now()
	l.Log.Warn().Str("queue", q.Name()).Str("job_id", id).Str("entry", entry).Str("reason", reason).
		Msg("unreadable stream entry sent to the dead set")
	t := jobstate.Poison(q, jobstate.PoisonParams{ID: id, Entry: entry, At: began, Reason: reason})
	t.Type, t.Began = msg.Metadata[MetaType], began
	<-l.comp.Finish(t, nil)
	return Ended{Outcome: OutcomeDead, Err: errors.New(reason)}
}

// jobEvent adds the fields of every job line: queue, job_id, type and attempt.
func jobEvent(e *zerolog.Event, a *Attempt) *zerolog.Event {
	return e.Str("queue", a.Queue).Str("job_id", a.ID).Str("type", a.Type).Int("attempt", a.Number)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// TLSRefused reports whether err is a TLS handshake that failed for a reason waiting cannot
// fix. Either the server's certificate did not verify against the client's CAs or name. Or
// the server refused the client's certificate (a TLS alert: none given, or one it does not
// trust).
func TLSRefused(err error) bool {
	var verify *tls.CertificateVerificationError
	var host x509.HostnameError
	var unknownCA x509.UnknownAuthorityError
	var badCert x509.CertificateInvalidError
	var op *net.OpError
	return errors.As(err, &verify) || errors.As(err, &host) || errors.As(err, &unknownCA) ||
		errors.As(err, &badCert) || errors.As(err, &op) && op.Op == "remote error"
}
