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
