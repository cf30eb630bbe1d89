package stream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestRunning(t *testing.T) {
	checkLeaks(t)
	rdb := redistest.Client(t)
	topicA, topicB := redistest.UniqueName(t), redistest.UniqueName(t)
	publish(t, rdb, topicA, "a", 2)
	publish(t, rdb, topicB, "b", 1)
	sub := newTestSubscriber(t, rdb, Config{Concurrency: 10, ManualSettle: true})
	require.Zero(t, sub.Running(), "nothing subscribed")
	msgsA, err := sub.Subscribe(t.Context(), topicA)
	require.NoError(t, err)
	msgsB, err := sub.Subscribe(t.Context(), topicB)
	require.NoError(t, err)

	a := receiveN(t, msgsA, 2, 5*time.Second)
	b := receive(t, msgsB, 5*time.Second)
	require.Equal(t, 3, sub.Running(), "handed out on both topics")
	sub.Settle(a[0])
	require.Equal(t, 2, sub.Running())
	sub.Settle(a[1])
	sub.Settle(b)
	require.Zero(t, sub.Running())
}
