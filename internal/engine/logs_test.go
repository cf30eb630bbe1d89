package engine

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
)

// The buffer keeps the last lines within both bounds, counts what it cut, cuts a line longer
// than the whole budget to it, and takes a write of several lines (or a trailing newline, as
// zerolog writes) as those lines. After TakeLogs nothing more is kept.
func TestAttemptLogsBounds(t *testing.T) {
	r := &ProgressReporter{}
	require.Empty(t, r.TakeLogs(), "nothing logged: nothing sent")
	require.Empty(t, (*ProgressReporter)(nil).TakeLogs(), "an attempt with no reporter sends none")

	r = &ProgressReporter{}
	_, _ = r.Write([]byte("one\ntwo\r\n\nthree\n"))
	require.Equal(t, "0\none\ntwo\nthree", r.TakeLogs())
	_, _ = r.Write([]byte("late\n"))
	require.Empty(t, r.TakeLogs(), "a line after the outcome is dropped")

	r = &ProgressReporter{}
	huge := strings.Repeat("x", 2*jobstate.MaxLogBytes)
	_, _ = r.Write([]byte("before\n"))
	_, _ = r.Write([]byte(huge + "\n"))
	cut, lines := decode(t, r.TakeLogs())
	require.Equal(t, 1, cut, "the line before made room")
	require.Len(t, lines, 1)
	require.Len(t, lines[0], jobstate.MaxLogBytes-1)

	r = &ProgressReporter{}
	for range jobstate.MaxLogLines + 5 {
		_, _ = r.Write([]byte("l\n"))
	}
	cut, lines = decode(t, r.TakeLogs())
	require.Equal(t, 5, cut)
	require.Len(t, lines, jobstate.MaxLogLines)
}

func decode(t *testing.T, s string) (int, []string) {
	t.Helper()
	head, body, ok := strings.Cut(s, "\n")
	require.True(t, ok, "%q", s)
	var cut int
	for _, c := range head {
		cut = cut*10 + int(c-'0')
	}
	return cut, strings.Split(body, "\n")
}

// With a seal (Loop.SealLogs), each send seals the whole text of the lines, the count of lines
// cut left plain; a recorder keeps the lines and hands them back once.
func TestAttemptLogsSealed(t *testing.T) {
	var sealed []string
	r := &ProgressReporter{id: "j1", seal: func(id string, lines []byte) []byte {
		sealed = append(sealed, id+":"+string(lines))
		return append([]byte("\x00sealed:"), lines...)
	}}
	_, _ = r.Write([]byte("one\n"))
	require.Equal(t, "0\n\x00sealed:one", r.logsToReport())
	require.Empty(t, r.logsToReport(), "nothing new: nothing sent, nothing sealed")
	_, _ = r.Write([]byte("two\n"))
	require.Equal(t, "0\n\x00sealed:one\ntwo", r.TakeLogs(), "the outcome seals every line, the reported ones too")
	require.Equal(t, []string{"j1:one", "j1:one\ntwo"}, sealed)
	require.Empty(t, (&ProgressReporter{seal: r.seal}).TakeLogs(), "nothing logged: nothing sealed")

	rec := NewLogRecorder()
	rec.Logger().Info().Msg("kept")
	cut, lines := rec.Kept()
	require.Zero(t, cut)
	require.Len(t, lines, 1)
	require.Contains(t, lines[0], `"message":"kept"`)
	rec.Logger().Info().Msg("late")
	_, lines = rec.Kept()
	require.Empty(t, lines, "the recording ended")
}
