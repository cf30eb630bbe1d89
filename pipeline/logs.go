package pipeline

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/engine"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/publish"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/status"
)

// The bounds of one attempt's log lines (Job.Logger, Job.Logf): its last MaxLogLines lines,
// and no more of those than fit in MaxLogBytes (a newline counted after each). What was cut is
// counted (AttemptLog.Cut).
const (
	MaxLogLines = jobstate.MaxLogLines
	MaxLogBytes = jobstate.MaxLogBytes
)

// nopLogger is the logger of a Job no worker handed out: it writes nothing.
var nopLogger = zerolog.Nop()

// Logger is the running attempt's logger: each event it writes is one line, the JSON object
// zerolog writes, kept with the job's attempt (Inspector.JobLogs, conveyor status --logs, the
// API and the dashboard's job page). Lines are held in memory, bounded (MaxLogLines,
// MaxLogBytes: the oldest go first, counted), and written with the attempt's outcome in the
// same finish call, so a line costs no Redis call. Every outcome keeps its lines: completed,
// retried, snoozed, dead, a timeout's too. Each progress report (Job.Progress) also writes
// the lines logged since the last one, in the same call: while the job runs its logs show
// them (outcome status.AttemptRunning), and an attempt that ends without an outcome of its own
// (its worker killed, canceled while it ran, put back on shutdown, its lease lost) keeps the
// lines it logged before its last report (status.AttemptLost) and loses the later ones; one
// that never reported loses them all. Recovery runs the job again, and that attempt's lines
// are kept. Lines logged after the handler returned, or ran past its timeout, are dropped.
//
// The logger is made on the first call, so a handler that does not log pays nothing. It is
// safe for concurrent use. On a Job not handed to a handler by a Worker (a handler called by a
// test) it is a disabled logger, unless RecordLogs made it keep the lines.
func (j *Job) Logger() *zerolog.Logger {
	switch {
	case j.run.Progress != nil:
		return j.run.Progress.Logger()
	case j.recorder != nil:
		return j.recorder.Logger()
	}
	return &nopLogger
}

// Logf logs one line at info level through Logger: its message is fmt.Sprintf(format, args...).
func (j *Job) Logf(format string, args ...any) {
	if j.run.Progress == nil && j.recorder == nil {
		return
	}
	j.Logger().Info().Msgf(format, args...)
}

// RecordLogs makes the Logger and Logf of j, a Job no Worker handed out, keep their lines in
// memory as a worker's attempt keeps them (its last MaxLogLines lines, at most MaxLogBytes,
// the others cut and counted), so that a test can assert on what a handler logs: package
// pipelinetest's Run does. The function it returns ends the recording (later lines are
// dropped, as a worker drops lines logged after the handler returned) and returns the lines
// as Inspector.JobLogs would: Attempt is j.Attempt, Outcome is empty (it is the caller's to
// judge). On a Job a Worker handed out it records nothing: the worker keeps the lines.
func (j *Job) RecordLogs() func() AttemptLog {
	if j.run.Progress != nil {
		return func() AttemptLog { return AttemptLog{Attempt: j.Attempt} }
	}
	r := engine.NewLogRecorder()
	j.recorder = r
	attempt := j.Attempt
	return func() AttemptLog {
		cut, lines := r.Kept()
		return AttemptLog{Attempt: attempt, Cut: cut, Lines: lines}
	}
}

// runningNow reports whether the running item of attempt, the last of the job's logs when last
// is true, is the job's attempt that runs now: it is not yet in progress before its start
// mark is written, and a snoozed job's record counts one attempt fewer until then.
func runningNow(j *Job, attempt int, last bool) bool {
	return last && (j.Status == status.InProgress || j.Status == status.Queued) && attempt >= j.Attempt
}

// AttemptLog is what one attempt of a job logged (Job.Logger, Job.Logf).
type AttemptLog struct {
	// Attempt is the attempt's number (JobAttempt.Number): a snoozed attempt and the run after
	// it share one, and after a replay the attempts count from 1 again.
	Attempt int
	// Outcome is how the attempt ended: status.AttemptCompleted, status.AttemptFailed,
	// status.AttemptRetried or status.AttemptSnoozed; status.AttemptRunning for the attempt
	// that runs now, with the lines it logged up to its last progress report (Job.Progress);
	// status.AttemptCanceled for those of the attempt that ran when the job was canceled;
	// status.AttemptLost for those of another attempt that ended without an outcome (its
	// worker killed, put back on shutdown, its lease lost).
	Outcome string
	// EndedAt is when the attempt ended, by its worker's clock; for a running or lost
	// attempt, when its last progress report wrote its lines, by Redis's clock.
	EndedAt time.Time
	// Cut counts the attempt's earlier lines dropped to keep it within MaxLogLines and
	// MaxLogBytes; Lines are the last ones, oldest first.
	Cut   int
	Lines []string
	// Sealed is the attempt's lines as stored, sealed (WorkerConfig.Keys seals them as
	// keyring.Logs), when they were read without their key or did not open: Lines is then
	// the one line keyring.Describe says ("<encrypted, N bytes, key K>"), and keyring.KeyID
	// names the key. Nil when the lines are plain or were opened.
	Sealed []byte
}

// Open opens the attempt's sealed lines with k, for the job jobID, in place. Lines sealed
// under a key k lacks, or that do not open, stay sealed; the error says why (errors.Is
// keyring.ErrUnknownKey or keyring.ErrCorrupt). A server that shows logs to some callers only
// reads them sealed (an Inspector without Keys) and opens them per caller so.
func (a *AttemptLog) Open(k *keyring.Keyring, jobID string) error {
	if a.Sealed == nil {
		return nil
	}
	plain, err := k.Open(keyring.Logs, jobID, a.Sealed)
	if err != nil {
		return err
	}
	a.Sealed, a.Lines = nil, splitLines(string(plain))
	return nil
}

// Seal seals the attempt's plain lines with k for the job jobID, in place, so that they show
// as "<encrypted, N bytes, key K>": what a server shows a caller not allowed to read payloads
// when the lines were stored before encryption was turned on. Sealed lines stay as they are.
func (a *AttemptLog) Seal(k *keyring.Keyring, jobID string) {
	if a.Sealed != nil || len(a.Lines) == 0 || k == nil {
		return
	}
	a.setSealed(k.Seal(keyring.Logs, jobID, []byte(strings.Join(a.Lines, "\n"))))
}

// setSealed keeps b, the attempt's lines sealed, and shows them as one line saying so.
func (a *AttemptLog) setSealed(b []byte) {
	a.Sealed = b
	a.Lines = []string{cmp.Or(keyring.Describe(b), fmt.Sprintf("<encrypted, damaged, %d bytes stored>", len(b)))}
}

// splitLines is the lines of a sealed attempt's plaintext, newline-separated as the worker
// sealed them (jobstate.EncodeLogs without its count).
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// logJSON is the wire form of an AttemptLog: `conveyor status --logs --json` and the API's.
type logJSON struct {
	Attempt int      `json:"attempt"`
	Outcome string   `json:"outcome"`
	EndedAt int64    `json:"ended_at"`
	Cut     int      `json:"cut"`
	Lines   []string `json:"lines"`
	// Encrypted says, as a Job's "encrypted" does for its parts, that the lines are still
	// sealed (read without their key): lines is then the one line "<encrypted, N bytes, key K>".
	Encrypted *sealedJSON `json:"encrypted,omitempty"`
}

// MarshalJSON writes the attempt's log with its end as unix milliseconds.
func (a AttemptLog) MarshalJSON() ([]byte, error) {
	return json.Marshal(logJSON{Attempt: a.Attempt, Outcome: a.Outcome, EndedAt: unixMS(a.EndedAt), Cut: a.Cut,
		Lines: nonNil(a.Lines), Encrypted: sealedPart(a.Sealed)})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// JobLogs reads what job id of queue logged, one AttemptLog an attempt that logged, oldest
// first: the last 20 such attempts (keys.MaxAttemptHistory, as Job.Attempts). A job that
// never logged has none (an empty slice); ErrNotFound when there is no such job. Lines a worker
// sealed (WorkerConfig.Keys) are opened with InspectorConfig.Keys where it has their key; the
// others stay sealed (AttemptLog.Sealed) and read as one line, "<encrypted, N bytes, key K>".
// The lines go
// with the job: expired with it after its retention, deleted with it by a purge, a delete or
// the queue's deletion.
func (i *Inspector) JobLogs(ctx context.Context, queue, id string) ([]AttemptLog, error) {
	if err := i.checkJob(queue, id); err != nil {
		return nil, err
	}
	qs, err := i.lookup(ctx, queue, id)
	if err != nil {
		return nil, err
	}
	// The partition that holds the job's hash holds its logs.
	k, rec, err := publish.Find(ctx, i.store, qs, id)
	if err != nil || k < 0 {
		return nil, cmp.Or(err, ErrNotFound)
	}
	j, err := jobFromRecord(qs[k].Name(), id, rec, nil) // its status and attempt only: nothing to open
	if err != nil {
		return nil, err
	}
	logs, err := i.store.Logs(ctx, qs[k], id)
	if err != nil {
		return nil, fmt.Errorf("logs %s/%s: %w", queue, id, err)
	}
	out := make([]AttemptLog, len(logs))
	for n, l := range logs {
		out[n] = AttemptLog{Attempt: l.Attempt, Outcome: l.Outcome, EndedAt: l.Ended, Cut: l.Cut, Lines: l.Lines}
		if l.Sealed != "" {
			if keyring.Sealed([]byte(l.Sealed)) {
				out[n].setSealed([]byte(l.Sealed))
				if i.cfg.Keys != nil {
					_ = out[n].Open(i.cfg.Keys, id) // lines that do not open stay sealed, shown so
				}
			} else {
				out[n].Lines = splitLines(l.Sealed) // a line of the handler's own that starts with NUL
			}
		}
		switch last := n == len(logs)-1; {
		case l.Outcome != status.AttemptRunning || runningNow(j, l.Attempt, last):
		case last && j.Status == status.Canceled && l.Attempt >= j.Attempt: // its start mark may not be written
			out[n].Outcome = status.AttemptCanceled // the job was canceled while it ran
		default:
			// Written by a progress report of an attempt that never wrote its outcome: its
			// worker died, or it was put back or lost its lease.
			out[n].Outcome = status.AttemptLost
		}
	}
	return out, nil
}
