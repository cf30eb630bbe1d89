package pipeline

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/publish"
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
// test) it is a disabled logger.
func (j *Job) Logger() *zerolog.Logger {
	if j.run.Progress == nil {
		return &nopLogger
	}
	return j.run.Progress.Logger()
}

// Logf logs one line at info level through Logger: its message is fmt.Sprintf(format, args...).
func (j *Job) Logf(format string, args ...any) {
	if j.run.Progress == nil {
		return
	}
	j.run.Progress.Logger().Info().Msgf(format, args...)
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
}

// logJSON is the wire form of an AttemptLog: `conveyor status --logs --json` and the API's.
type logJSON struct {
	Attempt int      `json:"attempt"`
	Outcome string   `json:"outcome"`
	EndedAt int64    `json:"ended_at"`
	Cut     int      `json:"cut"`
	Lines   []string `json:"lines"`
}

// MarshalJSON writes the attempt's log with its end as unix milliseconds.
func (a AttemptLog) MarshalJSON() ([]byte, error) {
	return json.Marshal(logJSON{Attempt: a.Attempt, Outcome: a.Outcome, EndedAt: unixMS(a.EndedAt), Cut: a.Cut,
		Lines: nonNil(a.Lines)})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// JobLogs reads what job id of queue logged, one AttemptLog an attempt that logged, oldest
// first: the last 20 such attempts (keys.MaxAttemptHistory, as Job.Attempts). A job that
// never logged has none (an empty slice); ErrNotFound when there is no such job. The lines go
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
