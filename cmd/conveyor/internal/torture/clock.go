package torture

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// ClockPoll is how often a worker under the clock-step nemesis reads its clock file again.
const ClockPoll = 100 * time.Millisecond

// Clock is a worker's wall clock under the clock-step nemesis: the true clock plus an offset
// the harness writes to a file (WriteOffset), read again every ClockPoll, so that a running
// worker's clock steps without a restart. Only a worker given the hidden
// --torture-clock-file has one; a plain worker reads no file. A file the harness has not
// written yet, or one being replaced, reads as the offset it had.
type Clock struct {
	path string
	off  atomic.Int64 // nanoseconds
	stop chan struct{}
	done chan struct{}
}

// OpenClock reads path's offset (none yet: 0) and reads it again every every until Close.
func OpenClock(path string, every time.Duration) (*Clock, error) {
	c := &Clock{path: path, stop: make(chan struct{}), done: make(chan struct{})}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	go func() {
		defer close(c.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
				_ = c.Reload() // a torn read cannot happen (WriteOffset renames); keep the last offset
			}
		}
	}()
	return c, nil
}

// Now is the true time plus the offset. Time.Add moves the monotonic reading too, so a
// duration between two readings on either side of a step includes it, as one measured on a
// host's wall clock would: the worker's waits and timeouts use time.Now, not this.
func (c *Clock) Now() time.Time { return time.Now().Add(c.Offset()) }

// Offset is the offset last read.
func (c *Clock) Offset() time.Duration { return time.Duration(c.off.Load()) }

// Reload reads the file now; a missing file is an offset of 0.
func (c *Clock) Reload() error {
	d, err := ReadOffset(c.path)
	if err != nil {
		return err
	}
	c.off.Store(int64(d))
	return nil
}

// Close stops the reads.
func (c *Clock) Close() {
	close(c.stop)
	<-c.done
}

// ReadOffset reads a clock file: a signed whole number of milliseconds and a newline. A
// missing file is 0.
func ReadOffset(path string) (time.Duration, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	ms, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("torture: clock file %s: %w", path, err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// WriteOffset sets a clock file's offset (to the millisecond), replacing the file whole
// (a rename), so that a reader sees the old offset or the new one, never a torn write.
func WriteOffset(path string, d time.Duration) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(tmp, "%d\n", d.Milliseconds())
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}
