package engine

import (
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
)

// TestCompleterDropsEndedMarks: a start mark whose attempt ended leaves Completer.starts soon,
// even behind a live mark at the head that is not due (a long job): the slice holds the
// attempts its marks are fields of. Before the compaction it kept every one of them until
// the head's mark was written; a draining worker's heap peaked at twice its size.
func TestCompleterDropsEndedMarks(t *testing.T) {
	c := NewCompleter(nil, jobstate.FinishConfig{}, time.Hour, 50, 1000, zerolog.Nop())
	q := keys.New(keys.DefaultPrefix, "q")
	mark := func(i int) *StartMark {
		return &StartMark{Q: &q, ID: "job-" + strconv.Itoa(i), Entry: strconv.Itoa(i) + "-0", Attempt: 1}
	}
	var live []*StartMark
	for i := range 10_000 {
		m := mark(i)
		c.Started(m)
		if i%1000 == 0 {
			live = append(live, m) // still running: its mark waits
			continue
		}
		c.Forget(m)
		c.mu.Lock()
		require.LessOrEqual(t, len(c.starts), 2*c.live+compactSlack+1, "after %d marks", i+1)
		c.mu.Unlock()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Equal(t, len(live), c.live)
	var waiting []*StartMark
	for _, m := range c.starts {
		if m.state == markQueued {
			waiting = append(waiting, m)
		}
	}
	require.Equal(t, live, waiting, "the live marks, in the order noted")
}

// TestCompleterTakesDueMarksPastACompaction: taking the due marks drops each as it goes; a
// drop must not compact the list under the walk (it did, and met the walk's cleared slots:
// a nil dereference in a fresh CI's pipeline tests).
func TestCompleterTakesDueMarksPastACompaction(t *testing.T) {
	c := NewCompleter(nil, jobstate.FinishConfig{}, time.Hour, 50, 1000, zerolog.Nop())
	q := keys.New(keys.DefaultPrefix, "q")
	const n = 300
	for i := range n {
		m := &StartMark{Q: &q, ID: "job-" + strconv.Itoa(i), Entry: strconv.Itoa(i) + "-0", Attempt: 1}
		c.Started(m)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	batch := c.dueStartsLocked(true)
	require.Len(t, batch, n)
	for i, tr := range batch {
		require.Equal(t, "job-"+strconv.Itoa(i), tr.ID, "in the order noted")
	}
	require.Zero(t, c.live)
	require.Empty(t, c.starts)
}
