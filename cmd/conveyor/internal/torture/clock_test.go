package torture

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestClockFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w1")

	d, err := ReadOffset(path)
	require.NoError(t, err)
	require.Zero(t, d, "no file yet: the true clock")

	for _, want := range []time.Duration{-30 * time.Second, 2500 * time.Millisecond, 0} {
		require.NoError(t, WriteOffset(path, want))
		d, err := ReadOffset(path)
		require.NoError(t, err)
		require.Equal(t, want, d)
	}

	require.NoError(t, os.WriteFile(path, []byte("soon\n"), 0o600))
	_, err = ReadOffset(path)
	require.Error(t, err)

	// Opened with no polling to speak of: each Reload is the one read.
	require.NoError(t, WriteOffset(path, 7*time.Second))
	c, err := OpenClock(path, time.Hour)
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, 7*time.Second, c.Offset())
	require.NoError(t, WriteOffset(path, -4*time.Second))
	require.Equal(t, 7*time.Second, c.Offset(), "not read again yet")
	require.NoError(t, c.Reload())
	require.Equal(t, -4*time.Second, c.Offset())
	require.NoError(t, os.WriteFile(path, []byte("x"), 0o600))
	require.Error(t, c.Reload())
	require.Equal(t, -4*time.Second, c.Offset(), "an unreadable file keeps the last offset")
	// Now is the true time plus the offset: the true time is bracketed by two readings.
	before := time.Now()
	now := c.Now()
	after := time.Now()
	require.False(t, now.Before(before.Add(-4*time.Second)))
	require.False(t, now.After(after.Add(-4*time.Second)))
}

// A running clock picks a new offset up by itself.
func TestClockPolls(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w1")
	c, err := OpenClock(path, time.Millisecond)
	require.NoError(t, err)
	defer c.Close()
	require.Zero(t, c.Offset())
	require.NoError(t, WriteOffset(path, 12*time.Second))
	require.Eventually(t, func() bool { return c.Offset() == 12*time.Second }, 10*time.Second, time.Millisecond)
}
