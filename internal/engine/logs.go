package engine

import (
	"strings"

	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/jobstate"
)

// attemptLogs are the lines a running attempt's handler logged (pipeline's Job.Logger and
// Job.Logf), held in memory until the outcome carries them to finish.lua: no Redis call a line.
// The attempt's ProgressReporter holds it behind a pointer made by the first line, so that an
// attempt that logs nothing pays neither an allocation nor a byte of the finish call.
type attemptLogs struct {
	lines []string
	size  int // bytes of lines, a newline counted after each
	cut   int // earlier lines dropped to keep the bounds
	log   zerolog.Logger
	// fresh is set by a line not yet written with a progress report (logsToReport).
	fresh bool
}

// add keeps line, dropping the oldest lines past jobstate.MaxLogLines or MaxLogBytes. A line
// longer than the whole budget is cut to it.
func (l *attemptLogs) add(line string) {
	if len(line)+1 > jobstate.MaxLogBytes {
		line = line[:jobstate.MaxLogBytes-1]
	}
	l.lines = append(l.lines, line)
	l.size += len(line) + 1
	l.fresh = true
	k := 0
	for len(l.lines)-k > jobstate.MaxLogLines || l.size > jobstate.MaxLogBytes {
		l.size -= len(l.lines[k]) + 1
		l.lines[k] = ""
		k++
	}
	if k > 0 {
		l.lines = l.lines[k:]
		l.cut += k
	}
}

// Write keeps p's lines: zerolog writes one event a call, ending in a newline. Lines that
// arrive once the attempt ended are dropped.
func (r *ProgressReporter) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return len(p), nil
	}
	l := r.logsLocked()
	// One copy of p; the lines kept are pieces of it (zerolog reuses p).
	for s := string(p); s != ""; {
		line, rest, _ := strings.Cut(s, "\n")
		if line = strings.TrimSuffix(line, "\r"); line != "" {
			l.add(line)
		}
		s = rest
	}
	return len(p), nil
}

// logsLocked is the attempt's lines, made on first use; the caller holds r.mu.
func (r *ProgressReporter) logsLocked() *attemptLogs {
	if r.logs == nil {
		r.logs = &attemptLogs{}
		r.logs.log = zerolog.New(r).With().Timestamp().Logger()
	}
	return r.logs
}

// Logger is the attempt's logger: each event it writes is one line kept with the attempt
// (pipeline's Job.Logger). It is made on first use.
func (r *ProgressReporter) Logger() *zerolog.Logger {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended && r.logs == nil {
		return &endedLogger // its lines would be dropped: make nothing for them
	}
	return &r.logsLocked().log
}

// endedLogger is the logger of an attempt that ended before it first logged.
var endedLogger = zerolog.Nop()

// logsToReport is the attempt's lines so far for a progress report to write (progress.lua: the
// attempt's running item of the job's logs), empty when none came since the last report's. So
// what it logged before its last report outlives its worker's death (a SIGKILL, a crash).
func (r *ProgressReporter) logsToReport() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.logs
	if l == nil || !l.fresh {
		return ""
	}
	l.fresh = false
	return r.encode(l)
}

// TakeLogs ends the attempt's logging and returns its lines as finish.lua takes them
// (jobstate.EncodeLogs), empty when it logged nothing. Lines logged later are dropped: the
// outcome that carries these is on its way.
func (r *ProgressReporter) TakeLogs() string {
	if r == nil {
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = true
	l := r.logs
	if l == nil {
		return ""
	}
	r.logs = nil
	return r.encode(l)
}

// encode is l as the scripts take it (jobstate.EncodeLogs), its lines sealed when the worker
// seals (Loop.SealLogs). Each send seals the whole text it sends: the running item a report
// wrote is replaced whole by the next write, so no item mixes plain and sealed lines.
func (r *ProgressReporter) encode(l *attemptLogs) string {
	s := jobstate.EncodeLogs(l.cut, l.lines)
	if r.seal == nil || s == "" {
		return s
	}
	head, body, _ := strings.Cut(s, "\n")
	return head + "\n" + string(r.seal(r.id, []byte(body)))
}

// NewLogRecorder is a reporter that only keeps lines: it has no store, so it must not be
// asked to Report. It is the logger of a job run outside a worker (pipeline's Job.RecordLogs),
// bounded as an attempt's.
func NewLogRecorder() *ProgressReporter { return &ProgressReporter{} }

// Kept ends the attempt's logging, as TakeLogs does, and returns what it kept: the count of
// earlier lines cut and the lines, oldest first.
func (r *ProgressReporter) Kept() (cut int, lines []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = true
	l := r.logs
	if l == nil {
		return 0, nil
	}
	r.logs = nil
	return l.cut, l.lines
}
