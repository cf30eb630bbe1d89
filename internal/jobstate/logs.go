package jobstate

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

// The bounds of one attempt's log lines (pipeline's Job.Logf): the last MaxLogLines lines, and
// no more of them than fit in MaxLogBytes, a newline counted after each. The worker holds them
// in memory until the attempt's outcome, so they bound its memory per running job too.
const (
	MaxLogLines = 200
	MaxLogBytes = 32 << 10
)

// EncodeLogs is an attempt's lines as finish.lua takes them (Transition.Logs): the count of
// earlier lines cut, then each line, newline-separated. Lines hold no newline.
func EncodeLogs(cut int, lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	n := 8
	for _, l := range lines {
		n += len(l) + 1
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(strconv.Itoa(cut))
	for _, l := range lines {
		b.WriteByte('\n')
		b.WriteString(l)
	}
	return b.String()
}

// AttemptLogs are the lines one attempt of a job logged, as finish.lua kept them with its
// outcome.
type AttemptLogs struct {
	Attempt int
	// Outcome is how the attempt ended: status.Completed's and status.Failed's words, or the
	// ops "retry" and "snooze".
	Outcome string
	Ended   time.Time
	// Cut counts the attempt's earlier lines dropped to keep it within MaxLogLines and
	// MaxLogBytes.
	Cut   int
	Lines []string
	// Sealed is the attempt's lines as stored when the worker sealed them (pipeline's
	// WorkerConfig.Keys): the body of the item, whose first byte is NUL, as every sealed
	// value's is and no line's is (the worker keeps zerolog's JSON objects). Lines is then
	// nil: the store sees bytes only, and opening is pipeline's.
	Sealed string
}

// Logs reads job id's logs (keys.Queue.Logs), oldest attempt first: one LRANGE. A job that
// never logged, or no job at all, has none.
func (s *Store) Logs(ctx context.Context, q keys.Queue, id string) ([]AttemptLogs, error) {
	items, err := s.rdb.LRange(ctx, q.Logs(id), 0, -1).Result()
	if err != nil {
		return nil, rediserr.Wrap("logs", err)
	}
	out := make([]AttemptLogs, 0, len(items))
	for _, it := range items {
		if a, ok := decodeLogs(it); ok {
			out = append(out, a)
		}
	}
	return out, nil
}

// decodeLogs reads one item of a logs key: "<attempt> <outcome> <ended ms> <cut>\n<lines>"
// (lua/record.lua's cv_logs_add).
func decodeLogs(item string) (AttemptLogs, bool) {
	head, body, _ := strings.Cut(item, "\n")
	f := strings.Fields(head)
	if len(f) != 4 {
		return AttemptLogs{}, false
	}
	attempt, err1 := strconv.Atoi(f[0])
	ended, err2 := strconv.ParseInt(f[2], 10, 64)
	cut, err3 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil || err3 != nil {
		return AttemptLogs{}, false
	}
	a := AttemptLogs{Attempt: attempt, Outcome: f[1], Ended: time.UnixMilli(ended), Cut: cut}
	switch {
	case strings.HasPrefix(body, "\x00"):
		a.Sealed = body
	case body != "":
		a.Lines = strings.Split(body, "\n")
	}
	return a, true
}
