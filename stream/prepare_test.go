package stream

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// Config.Prepare sees each read batch before hand-out: what it keeps back is settled (its slot
// free for the next read, no ack), the rest is handed out with the context Prepare gave it.
func TestPrepare(t *testing.T) {
	checkLeaks(t)

	for _, manual := range []bool{true, false} {
		name := "ManualSettle"
		if !manual {
			name = "DeferAck"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rdb := redistest.Client(t)
			topic := redistest.UniqueName(t)
			ids := publish(t, rdb, topic, "m", 6)
			type mark struct{}
			var mu sync.Mutex
			var seen []string
			prepare := func(ctx context.Context, tp string, msgs []*message.Message) []bool {
				if tp != topic {
					t.Errorf("Prepare got topic %q, want %q", tp, topic)
				}
				skip := make([]bool, len(msgs))
				mu.Lock()
				defer mu.Unlock()
				for k, m := range msgs {
					seen = append(seen, m.Metadata[EntryIDKey])
					skip[k] = len(seen)%2 == 1 // the 1st, 3rd and 5th entries
					m.SetContext(context.WithValue(m.Context(), mark{}, true))
				}
				return skip
			}
			// Concurrency 3: the three kept back must give their slots back for all six to
			// be read.
			sub := newTestSubscriber(t, rdb, Config{Concurrency: 3, BatchSize: 3, ManualSettle: manual, DeferAck: true,
				Prepare: prepare, CloseTimeout: 100 * time.Millisecond})
			msgs, err := sub.Subscribe(t.Context(), topic)
			require.NoError(t, err)
			got := receiveN(t, msgs, 3, 5*time.Second)
			require.ElementsMatch(t, []string{ids[1], ids[3], ids[5]}, entryIDs(got)) // DeferAck hands out from goroutines: any order
			for _, m := range got {
				require.Equal(t, true, m.Context().Value(mark{}), "the context Prepare gave")
				_, ok := EntryValues(m.Context())
				require.True(t, ok)
			}
			requireNothing(t, msgs, 100*time.Millisecond)
			require.Equal(t, 3, sub.Running())
			// Nothing is acknowledged: the entries kept back are the application's.
			require.EqualValues(t, 6, pendingCount(t, rdb, topic))
			for _, m := range got {
				if manual {
					sub.Settle(m)
				} else {
					m.Ack()
				}
			}
			require.Eventually(t, func() bool { return sub.Running() == 0 }, 5*time.Second, time.Millisecond)
		})
	}
}
