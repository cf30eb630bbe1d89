package pipeline

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/conveyorq/conveyor/internal/engine"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/status"
)

// Task is what a producer asks to run: a type that selects the handler, an opaque payload and
// optional metadata. Metadata are string pairs handed to the handler and Watermill middleware.
type Task struct {
	Type     string
	Payload  []byte
	Metadata map[string]string
	// Opts are options for this task alone; EnqueueBatch applies them after the batch's own.
	Opts []Option
}

// Job is a job's state as stored in Redis, and what a handler receives.
//
// For a handler, Attempt is the number of the attempt that is running (1 for the first run)
// and Status is status.InProgress.
//
// With encryption at rest (ClientConfig.Keys) Payload and Result are stored sealed. A reader
// whose keyring has the key sees them opened. A reader without it gets the sealed bytes, which
// Sealed tells and MarshalJSON renders as "<encrypted, N bytes, key K>".
type Job struct {
	ID       string
	Queue    string
	Type     string
	Payload  []byte
	Metadata map[string]string
	Status   status.Status
	// Attempt counts executions started so far, including one lost with its worker.
	Attempt    int
	MaxRetries int
	// Timeout bounds each attempt; zero means none.
	Timeout     time.Duration
	CreatedAt   time.Time
	RunAt       time.Time
	EnqueuedAt  time.Time
	StartedAt   time.Time
	CompletedAt time.Time
	// Worker names the worker (its stream consumer) that ran the job last.
	Worker    string
	LastError string
	Result    []byte
	// Entry is the id of the stream entry that carries the job now (empty when it is not in
	// the stream). It is the fencing token of worker transitions.
	Entry   string
	Version int64
	// Duplicate is set on a job that Enqueue or EnqueueBatch returned without writing it: its
	// id (WithID) or unique key (WithUnique) named this existing job. It is not stored.
	Duplicate bool
	// Priority is the job's level within its queue (WithPriority), MinPriority (served first,
	// the default) to MaxPriority.
	Priority int
	// Debounce is the debounce window of a job published WithDebounce; nil for other jobs.
	Debounce *DebounceWindow
	// Debounced is set on the job Enqueue or EnqueueBatch returned when the publish joined the
	// pending job of its debounce key (replacing its payload) instead of creating one. It is
	// not stored.
	Debounced bool
	// Group is the fair group the job was published in (WithGroup); empty for none. Set on
	// jobs read back (Client.Get, Inspector.List); a handler's job, decoded from its stream
	// entry, leaves it empty.
	Group string
	// Workflow and Task name the workflow the job is a task of (Client.Workflow,
	// Client.Batch) and its name there; empty for other jobs. Set on jobs read back, as Group.
	Workflow, Task string
	// ScheduledFor says why a scheduled job waits, when it is not the delay it was published
	// with: "retry" (a failed attempt's backoff) or "snooze" (its handler's Snooze or RetryAt).
	ScheduledFor string
	// Snoozes counts the times the job's handler snoozed it (bounded: WorkerConfig.MaxSnoozes).
	Snoozes int
	// Reported is the last progress report of the job's handler (Job.Progress). While the job
	// runs it is the running attempt's; nil until it reports, since a retry or a recovered job
	// does not show the attempt before's. While a retry waits it is the failed attempt's. Once
	// the job finished it is the last attempt's. That need not be 100: it says where a failed
	// job stopped. Nil on a handler's own job.
	Reported *Progress
	// Attempts are the job's attempts, oldest first, the last 20: each one's
	// worker, start, end, outcome and error. Set on jobs read back (Client.Get,
	// Inspector.Get, Inspector.List); empty for a job that never started, and on a handler's
	// own job.
	Attempts []JobAttempt
	// WaitingFor says why the job is not running: set on a job read back through the
	// Inspector (Get, Find, List) while it is waiting, scheduled or queued; nil once it runs
	// or ended, and on jobs the Client reads.
	WaitingFor *WaitingFor

	// run is a handler's job's attempt, as the worker's loop holds it (its Progress reporter).
	run engine.Attempt
	// recorder keeps the lines of a job no worker handed out, once RecordLogs was called.
	recorder *engine.ProgressReporter
	// keys is a handler's job's worker's keyring (WorkerConfig.Keys), for Dependencies.
	keys *keyring.Keyring
}

// Progress is a progress report of a job's handler (Job.Progress).
type Progress struct {
	Percent int    // 0 to 100
	Message string // at most 200 bytes
	// At is when the report was written, by Redis's clock.
	At time.Time
}

// DebounceWindow is the debounce window of a job published WithDebounce, by Redis's clock: the
// job is due (RunAt) at the earliest of its last publish + quiet and Until.
type DebounceWindow struct {
	Key       string    // the caller's debounce key
	First     time.Time // the window's first publish
	Until     time.Time // first + max wait: the latest the job is due
	Publishes int       // the publishes the window took, the first included
}

// debounceJSON is the wire form of a DebounceWindow.
type debounceJSON struct {
	Key       string `json:"key"`
	FirstAt   int64  `json:"first_at"`
	Until     int64  `json:"until"`
	Publishes int    `json:"publishes"`
}

// jobJSON is the wire form of a job: the CLI's `status --json` contract and the HTTP API's.
type jobJSON struct {
	ID          string            `json:"id"`
	Queue       string            `json:"queue"`
	Type        string            `json:"type"`
	Status      status.Status     `json:"status"`
	Attempt     int               `json:"attempt"`
	MaxRetries  int               `json:"max_retries"`
	Priority    int               `json:"priority"`
	TimeoutMS   int64             `json:"timeout_ms"`
	Payload     json.RawMessage   `json:"payload"`
	Metadata    map[string]string `json:"metadata"`
	Result      json.RawMessage   `json:"result"`
	LastError   string            `json:"last_error"`
	Worker      string            `json:"worker"`
	Entry       string            `json:"entry"`
	Version     int64             `json:"version"`
	CreatedAt   int64             `json:"created_at"`
	RunAt       int64             `json:"run_at"`
	EnqueuedAt  int64             `json:"enqueued_at"`
	StartedAt   int64             `json:"started_at"`
	CompletedAt int64             `json:"completed_at"`
	Debounce    *debounceJSON     `json:"debounce,omitempty"`
	Debounced   bool              `json:"debounced,omitempty"`
	Group       string            `json:"group,omitempty"`
	Workflow    string            `json:"workflow,omitempty"`
	Task        string            `json:"task,omitempty"`
	// ScheduledFor is "retry" or "snooze" (Job.ScheduledFor), omitted otherwise.
	ScheduledFor string `json:"scheduled_for,omitempty"`
	Snoozes      int    `json:"snoozes,omitempty"`
	// Progress fields: absent when the job's attempt reported none (Job.Reported).
	Progress        *int   `json:"progress,omitempty"`
	ProgressMessage string `json:"progress_message,omitempty"`
	ProgressAt      int64  `json:"progress_at,omitempty"`
	// Attempts is Job.Attempts, oldest first; an empty array when the job never started.
	Attempts []attemptJSON `json:"attempts"`
	// WaitingFor is Job.WaitingFor, absent when nil.
	WaitingFor *waitingForJSON `json:"waiting_for,omitempty"`
	// Encrypted lists the parts still sealed (read without their key), absent when none.
	Encrypted *encryptedJSON `json:"encrypted,omitempty"`
}

// encryptedJSON is the wire form of a job's parts still sealed.
type encryptedJSON struct {
	Payload *sealedJSON `json:"payload,omitempty"`
	Result  *sealedJSON `json:"result,omitempty"`
}

// sealedJSON says what a sealed part is without opening it.
type sealedJSON struct {
	Key   string `json:"key"`
	Bytes int    `json:"bytes"`
}

// sealedPart is the wire form of a sealed value, nil for one that is not sealed. A value cut
// short keeps its key empty and counts the bytes stored.
func sealedPart(b []byte) *sealedJSON {
	if !keyring.Sealed(b) {
		return nil
	}
	id, _ := keyring.KeyID(b)
	n := keyring.PlainLen(b)
	if n < 0 {
		n = len(b)
	}
	return &sealedJSON{Key: id, Bytes: n}
}

// Sealed reports whether the job's payload and result are still sealed: the job was read
// without the key that opens them (or they did not open). Their bytes are then the stored
// ciphertext; keyring.Describe says what each is.
func (j *Job) Sealed() (payload, result bool) {
	return keyring.Sealed(j.Payload), keyring.Sealed(j.Result)
}

// Open opens the job's sealed payload and result with k, in place. A part sealed under a key
// k lacks, or that does not open, stays sealed; the error says why (errors.Is
// keyring.ErrUnknownKey or keyring.ErrCorrupt), for the payload first. A server that shows
// payloads to some callers only reads jobs sealed (ClientConfig.KeepSealed) and opens them
// per caller so.
func (j *Job) Open(k *keyring.Keyring) error {
	var errs []error
	if keyring.Sealed(j.Payload) {
		if p, err := k.Open(keyring.Payload, j.ID, j.Payload); err != nil {
			errs = append(errs, err)
		} else {
			j.Payload = p
		}
	}
	if keyring.Sealed(j.Result) {
		if r, err := k.Open(keyring.Result, j.ID, j.Result); err != nil {
			errs = append(errs, err)
		} else {
			j.Result = r
		}
	}
	return errors.Join(errs...)
}

// MarshalJSON writes the job with times as unix milliseconds (0 when not yet). Payload and
// result are JSON when they are valid JSON, else JSON strings (null when empty). A part still
// sealed is the string "<encrypted, N bytes, key K>" (keyring.Describe), and "encrypted"
// lists it with its key and plaintext length.
func (j *Job) MarshalJSON() ([]byte, error) {
	md := j.Metadata
	if md == nil {
		md = map[string]string{}
	}
	w := jobJSON{
		Attempts: attemptsJSON(j.Attempts), Debounced: j.Debounced, Group: j.Group, Workflow: j.Workflow, Task: j.Task,
		ScheduledFor: j.ScheduledFor, Snoozes: j.Snoozes, ID: j.ID, Queue: j.Queue, Type: j.Type, Status: j.Status,
		Attempt: j.Attempt, MaxRetries: j.MaxRetries, Priority: max(j.Priority, MinPriority), TimeoutMS: j.Timeout.Milliseconds(),
		Payload: rawOrString(j.Payload), Metadata: md, Result: rawOrString(j.Result),
		LastError: j.LastError, Worker: j.Worker, Entry: j.Entry, Version: j.Version,
		CreatedAt: unixMS(j.CreatedAt), RunAt: unixMS(j.RunAt), EnqueuedAt: unixMS(j.EnqueuedAt),
		StartedAt: unixMS(j.StartedAt), CompletedAt: unixMS(j.CompletedAt), WaitingFor: j.WaitingFor.wire(),
	}
	if d := j.Debounce; d != nil {
		w.Debounce = &debounceJSON{Key: d.Key, FirstAt: unixMS(d.First), Until: unixMS(d.Until), Publishes: d.Publishes}
	}
	if p := j.Reported; p != nil {
		w.Progress, w.ProgressMessage, w.ProgressAt = &p.Percent, p.Message, unixMS(p.At)
	}
	if sp, sr := sealedPart(j.Payload), sealedPart(j.Result); sp != nil || sr != nil {
		w.Encrypted = &encryptedJSON{Payload: sp, Result: sr}
	}
	return json.Marshal(w)
}

func rawOrString(b []byte) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	if d := keyring.Describe(b); d != "" {
		s, _ := json.Marshal(d)
		return s
	}
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	s, _ := json.Marshal(string(b))
	return s
}

func unixMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
