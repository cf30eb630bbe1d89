package recovery

import (
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

func TestNextID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"1700000000000-0", "1700000000000-1"},
		{"5-41", "5-42"},
		{"0-18446744073709551614", "0-18446744073709551615"},
		{"7-18446744073709551615", "8-0"},
		{"garbage", "garbage"},
		{"1-x", "1-x"},
	} {
		if got := nextID(tc.in); got != tc.want {
			t.Errorf("nextID(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// The watch's rules with made-up times: VisibilityTimeout 3s (lease 1s, jumps over 300ms),
// Interval 500ms (silences over 1s are gaps).
func TestWatch(t *testing.T) {
	t.Parallel()
	log := zerolog.Nop()
	w := newWatch(Config{VisibilityTimeout: 3 * time.Second, Interval: 500 * time.Millisecond}, &log)
	require.Equal(t, time.Second, w.lease)
	require.Equal(t, time.Second, w.maxGap)
	require.Equal(t, 300*time.Millisecond, w.maxSkew)
	t0 := w.base
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// A reading of Redis's clock, running `ahead` ms ahead of ours, by a call sent at ms and
	// answered 2ms later.
	read := func(ms, ahead int) {
		w.clock(at(ms), at(ms+2), time.Unix(0, 0).Add(at(ms+1).Sub(t0)+time.Duration(ahead)*time.Millisecond))
	}
	trustedAt := func(ms int) bool { _, ok, _ := w.sightings(at(ms)); return ok }
	ids := func(s ...string) map[string]struct{} {
		m := map[string]struct{}{}
		for _, id := range s {
			m[id] = struct{}{}
		}
		return m
	}

	require.False(t, trustedAt(0), "trusted before any answer")
	read(0, 5000) // any offset to start with
	require.False(t, trustedAt(500))
	w.answered(at(500))
	epoch, _, seen := w.sightings(at(600))
	require.Empty(t, seen)
	w.remember(epoch, ids("a", "b"), true)
	read(1000, 5100) // 100ms of drift is no jump
	require.True(t, trustedAt(1002), "not trusted after a lease period")
	epoch, _, seen = w.sightings(at(1002))
	require.Equal(t, ids("a", "b"), seen)
	w.remember(epoch, ids("b", "c"), false) // a partial scan adds
	_, _, seen = w.sightings(at(1003))
	require.Equal(t, ids("a", "b", "c"), seen)
	w.remember(epoch, ids("c"), true) // a complete one replaces
	_, _, seen = w.sightings(at(1004))
	require.Equal(t, ids("c"), seen)

	// A silence just within the threshold is no gap; one beyond it is.
	w.answered(at(2002))
	require.True(t, trustedAt(2002))
	require.True(t, w.valid(epoch))
	w.answered(at(3100))
	require.False(t, w.valid(epoch), "a silence of 1098ms is no gap")
	require.False(t, trustedAt(3100))
	epoch, _, seen = w.sightings(at(3100))
	require.Empty(t, seen, "sightings survived a gap")
	w.remember(epoch-1, ids("old"), true) // a scan that began before the gap
	_, _, seen = w.sightings(at(3100))
	require.Empty(t, seen, "a scan from before the gap was remembered")
	require.True(t, trustedAt(4100), "not trusted a lease period after the gap")

	// A clock jump, ahead or back, is a gap; the reading after it is the new baseline.
	w.answered(at(4000))
	read(4200, 5000) // first reading since the gap: baseline
	read(4700, 5250)
	require.True(t, trustedAt(4702), "250ms is no jump")
	read(5200, 6000)
	require.False(t, trustedAt(5202), "a jump of 750ms ahead was not seen")
	read(5700, 6000)
	read(6202, 6000)
	require.True(t, trustedAt(6204))
	read(6700, 5000)
	require.False(t, trustedAt(6702), "a jump back was not seen")
	// A slow reading is uncertain by half its round trip: no jump is called within that.
	read(7200, 5000)
	// Sent at 7700, answered at 8100, Redis read its clock at 7700 and ran 5000ms ahead: taken
	// at the middle, the offset looks 200ms smaller, and another 250ms of drift are within the
	// 300ms allowed plus the 200ms of uncertainty.
	w.clock(at(7700), at(8100), time.Unix(0, 0).Add(at(7700).Sub(t0)+4750*time.Millisecond))
	epoch, _, _ = w.sightings(at(8100))
	require.True(t, w.valid(epoch), "a slow reading was taken for a jump")

	// A failed call is a gap; the next answer starts a new observation.
	w.failed(errors.New("connection refused"))
	require.False(t, w.valid(epoch))
	require.False(t, trustedAt(9000))
	w.answered(at(9000))
	require.False(t, trustedAt(9999))
	w.answered(at(9500))
	require.True(t, trustedAt(10000))
}
