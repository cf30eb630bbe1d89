package pipeline

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/stream"
)

// The running jobs of one id in two queues chain under the id and leave it in any order; the
// canceled events of jobs not running here are kept at most recentMax, and for a lease
// interval only.
func TestCancelsBookkeeping(t *testing.T) {
	t.Parallel()
	c := newCancels(&Worker{cfg: WorkerConfig{VisibilityTimeout: 30 * time.Second}})
	qa, qb := keys.New("p", "a"), keys.New("p", "b")
	msg := func(q keys.Queue) *message.Message {
		m := message.NewMessage("job-1", nil)
		m.Metadata[stream.StreamKey] = q.Stream()
		m.Metadata[stream.EntryIDKey] = "1-0"
		return m
	}
	a := c.register(&qa, nil, msg(qa))
	b := c.register(&qb, nil, msg(qb))
	require.Equal(t, b, c.running["job-1"])
	require.Equal(t, a, b.next)
	c.done(a)
	require.Equal(t, b, c.running["job-1"])
	require.Nil(t, b.next)
	c.done(b)
	require.Empty(t, c.running)

	now := time.Now()
	for i := range recentMax + 10 {
		c.rememberLocked(runKey{qa.Events(), string(rune('a'+i%26)) + time.Duration(i).String()}, now)
	}
	require.Len(t, c.recent, recentMax)
	c.rememberLocked(runKey{qa.Events(), "late"}, now.Add(c.keepRecent()))
	require.Len(t, c.recent, 1, "older than a lease interval: dropped")
}
