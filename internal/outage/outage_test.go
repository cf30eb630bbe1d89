package outage

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSpell(t *testing.T) {
	t.Parallel()
	s := Spell{Min: 100 * time.Millisecond, Max: 400 * time.Millisecond}
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

	_, ended := s.OK(t0)
	require.False(t, ended, "no spell yet")
	require.False(t, s.Failing())

	require.Equal(t, Step{Log: true, Wait: 100 * time.Millisecond, Tries: 1}, s.Failed(at(0)))
	require.True(t, s.Failing())
	// Failures within the step are not logged; they wait for the step's end.
	require.Equal(t, Step{Wait: 70 * time.Millisecond, Tries: 1, FailingFor: 30 * time.Millisecond}, s.Failed(at(30)))
	require.Equal(t, Step{Log: true, Wait: 200 * time.Millisecond, Tries: 2, FailingFor: 100 * time.Millisecond}, s.Failed(at(100)))
	require.Equal(t, Step{Log: true, Wait: 400 * time.Millisecond, Tries: 3, FailingFor: 300 * time.Millisecond}, s.Failed(at(300)))
	require.Equal(t, Step{Log: true, Wait: 400 * time.Millisecond, Tries: 4, FailingFor: 700 * time.Millisecond}, s.Failed(at(700)), "capped at Max")

	lasted, ended := s.OK(at(900))
	require.True(t, ended)
	require.Equal(t, 900*time.Millisecond, lasted)
	_, ended = s.OK(at(950))
	require.False(t, ended, "one end per spell")

	require.Equal(t, Step{Log: true, Wait: 100 * time.Millisecond, Tries: 1}, s.Failed(at(1000)), "a new spell starts from Min")
}

func TestRound(t *testing.T) {
	t.Parallel()
	for in, want := range map[time.Duration]string{
		2500850123 * time.Nanosecond: "2.501s",
		1234567 * time.Nanosecond:    "1.235ms",
		85432 * time.Nanosecond:      "85µs",
		90 * time.Second:             "1m30s",
	} {
		require.Equal(t, want, Round(in).String())
	}
}
