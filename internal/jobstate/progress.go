package jobstate

import (
	"context"
	_ "embed"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/status"
)

var (
	//go:embed progress.lua
	progressSrc    string
	progressScript = newScript(progressSrc)
)

// MaxProgressMessage bounds a progress report's message, in bytes: a report is a line for a
// status page, and a bounded one keeps the events a watcher reads for it small.
const MaxProgressMessage = 200

// ProgressParams is one progress report of the handler running attempt Attempt of job ID from
// stream entry Entry.
type ProgressParams struct {
	ID, Entry string
	Attempt   int
	Percent   int    // 0 to 100
	Message   string // at most MaxProgressMessage bytes (CutMessage)
	Events    events.Mode
	// Logs are the attempt's lines so far (EncodeLogs), written as its running item of the
	// job's logs; empty when none are new since its last report.
	Logs string
}

// WriteProgress records a progress report (progress.lua), fenced like a worker's transition.
// Its Row is script.OK, with Data when it was written (Redis's unix ms). Or it is
// script.Refused, with Data the job's status: the job moved on from the entry or the attempt.
// Or it is script.NotFound.
func (s *Store) WriteProgress(ctx context.Context, q keys.Queue, p ProgressParams) (Row, error) {
	r, err := decode("progress", progressScript.Run(ctx, s.rdb, []string{q.Job(p.ID), q.Logged()},
		p.ID, p.Entry, p.Attempt, p.Percent, p.Message, p.Events.Command(), q.Events(), p.Logs))
	if err != nil {
		return Row{}, err
	}
	row := Row{Code: r.code}
	if len(r.rest) > 0 {
		switch v := r.rest[0].(type) {
		case int64:
			row.Data = strconv.FormatInt(v, 10)
		case string:
			row.Data = v
		}
	}
	return row, nil
}

// CutMessage cuts a progress message to MaxProgressMessage bytes, on a rune boundary, and
// turns line breaks into spaces: a report is one line.
func CutMessage(msg string) string {
	if len(msg) > MaxProgressMessage {
		n := MaxProgressMessage
		for n > 0 && !utf8.RuneStart(msg[n]) {
			n--
		}
		msg = msg[:n]
	}
	if strings.ContainsAny(msg, "\r\n") {
		msg = strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ").Replace(msg)
	}
	return msg
}

// ProgressReport is a job's last progress report, as progress.lua stored it (keys.FieldProgress).
type ProgressReport struct {
	Attempt int       // the attempt whose handler reported it
	Entry   string    // the stream entry that attempt ran from
	At      time.Time // when it was written, by Redis's clock
	Percent int
	Message string
}

// ParseProgress reads a keys.FieldProgress value; ok is false when it is malformed (the field
// comes from Redis, where anything may have been written).
func ParseProgress(v string) (p ProgressReport, ok bool) {
	parts := strings.SplitN(v, " ", 5)
	if len(parts) < 4 {
		return ProgressReport{}, false
	}
	attempt, err1 := strconv.Atoi(parts[0])
	at, err2 := strconv.ParseInt(parts[2], 10, 64)
	pct, err3 := strconv.Atoi(parts[3])
	if err1 != nil || err2 != nil || err3 != nil || attempt < 0 || at <= 0 || pct < 0 || pct > 100 || parts[1] == "" {
		return ProgressReport{}, false
	}
	p = ProgressReport{Attempt: attempt, Entry: parts[1], At: time.UnixMilli(at), Percent: pct}
	if len(parts) == 5 {
		p.Message = parts[4]
	}
	return p, true
}

// Shown reports whether a job's last progress report belongs to the job as it is now.
//
// While the job is queued or in progress, the report must be of the entry the job runs from.
// Every run has its own entry. A retry, a recovery or a job put back on shutdown has reported
// nothing on its new entry yet.
//
// Otherwise (scheduled for a retry, finished), the report must be of the job's attempt, which
// the outcome wrote. A finished job shows its last attempt's last report. A retry waiting
// shows the failed attempt's.
func (p ProgressReport) Shown(jobStatus string, attempt int, entry string) bool {
	if st := status.Status(jobStatus); st == status.Queued || st == status.InProgress {
		return p.Entry == entry
	}
	return p.Attempt == attempt
}
