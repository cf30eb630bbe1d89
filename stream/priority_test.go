package stream

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// weightsOf is a Config.Priority of topics named "<class>/<anything>", weighted by weights.
func weightsOf(weights map[string]int) func(string) (string, int) {
	return func(topic string) (string, int) {
		class, _, _ := strings.Cut(topic, "/")
		return class, weights[class]
	}
}

// merge receives from every channel of chs onto one, each message with its channel's index.
func merge(t testing.TB, chs []<-chan *message.Message) <-chan struct {
	k   int
	msg *message.Message
} {
	out := make(chan struct {
		k   int
		msg *message.Message
	})
	for k, ch := range chs {
		go func() {
			for m := range ch {
				select {
				case out <- struct {
					k   int
					msg *message.Message
				}{k, m}:
				case <-t.Context().Done():
					return
				}
			}
		}()
	}
	return out
}

// With weights 6:3:1 and every topic flooded, the messages handed out split 6:3:1 within 3%
// of each share over 10,000 (counted while every topic still has entries); partitions of a
// class (two topics here) share its weight. The weights divide contended slots: the consumer
// holds every slot and frees half of them at a time, so the readers always wait for slots.
// It frees them in a row, or each from a goroutine of its own as a worker's handlers do: the
// slots then free one at a time while the readers run, and each reader woken takes one slot
// and goes to read it; a slot freed while the classes owed the most are away reading must
// wait for them (Subscriber.holdLocked), or every class waiting takes a slot in turn,
// whatever its weight (the low class's share was 50% on a fast machine before the hold).
func TestPriorityWeightedShares(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		apart bool
	}{{"settled in a row", false}, {"settled apart", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, reads := weightedShares(t, tc.apart)
			t.Logf("shares of %d: %v in %d reads", weightedTotal, got, reads)
			for c, w := range weights631 {
				want := float64(weightedTotal) * float64(w) / 10
				assert.InDelta(t, want, float64(got[c]), want*0.03, "class %s (weight %d)", c, w)
			}
			// Reads stay batched: no fall back to one read per message.
			assert.Less(t, reads, weightedTotal/2, "reads of %d messages", weightedTotal)
		})
	}
}

var weights631 = map[string]int{"critical": 6, "default": 3, "low": 1}

const weightedTotal = 10_000

// weightedShares runs TestPriorityWeightedShares's flood and returns the messages handed out
// by class and how many reads brought them.
func weightedShares(t *testing.T, apart bool) (map[string]int, int) {
	rdb := redistest.Client(t)
	base := redistest.UniqueName(t)
	classes := []string{"critical", "critical", "default", "low"} // critical has two partitions
	backlog := []int{4500, 4500, 5000, 2000}                      // more than 10,000's shares of each
	var reads atomic.Int64
	sub := newTestSubscriber(t, rdb, Config{Concurrency: 20, BatchSize: 20, ManualSettle: true,
		Priority: weightsOf(weights631), CloseTimeout: time.Second,
		Prepare: func(context.Context, string, []*message.Message) []bool { reads.Add(1); return nil }})
	var chs []<-chan *message.Message
	for k, c := range classes {
		topic := c + "/" + base + "-" + string(rune('a'+k))
		publish(t, rdb, topic, c, backlog[k])
		msgs, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		chs = append(chs, msgs)
	}
	got := map[string]int{}
	left := append([]int(nil), backlog...)
	in := merge(t, chs)
	var held []*message.Message
	for n := 0; n < weightedTotal; n++ {
		select {
		case m := <-in:
			if held = append(held, m.msg); len(held) == 20 {
				for _, h := range held[:10] {
					if apart {
						go sub.Settle(h)
					} else {
						sub.Settle(h)
					}
				}
				held = append(held[:0], held[10:]...)
			}
			got[classes[m.k]]++
			left[m.k]--
			require.Positive(t, left[m.k], "topic %d ran dry before %d messages: raise its backlog (got %v after %d)", m.k, weightedTotal, got, n)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d messages of %d; got %v", n, weightedTotal, got)
		}
	}
	for _, h := range held {
		sub.Settle(h)
	}
	return got, int(reads.Load())
}

// A hold ends when the class it waits for has no more work: here the critical class's stream
// runs dry after full reads, so its reader's next read blocks (for BlockTime, 20 s) while the
// free slots are held for it. They go to the low class after at most maxHold, and every
// message is handed out well before that read ends; a hold until the read came back would
// stall the low class for BlockTime when the critical stream ran dry. 10x: the hand-out
// takes well under a second here; it must end within 10 s (before: within 1.5 s of a 2 s
// BlockTime, a margin a loaded machine missed).
func TestPriorityWeightedHoldEnds(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	base := redistest.UniqueName(t)
	topics := []string{"critical/" + base, "low/" + base}
	backlog := []int{40, 400}
	sub := newTestSubscriber(t, rdb, Config{Concurrency: 4, BatchSize: 2, ManualSettle: true, CloseTimeout: 100 * time.Millisecond,
		BlockTime: 20 * time.Second, Priority: weightsOf(map[string]int{"critical": 6, "low": 1})})
	var chs []<-chan *message.Message
	for k, topic := range topics {
		publish(t, rdb, topic, "m", backlog[k])
		msgs, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		chs = append(chs, msgs)
	}
	in := merge(t, chs)
	deadline := time.After(10 * time.Second)
	got := []int{0, 0}
	for got[0]+got[1] < backlog[0]+backlog[1] {
		select {
		case m := <-in:
			got[m.k]++
			go sub.Settle(m.msg)
		case <-deadline:
			t.Fatalf("handed out %v of %v in 10s", got, backlog)
		}
	}
	// Close waits for the reads under way, blocked for BlockTime on the empty streams: new
	// entries end them at once.
	closed := make(chan struct{})
	go func() { defer close(closed); _ = sub.Close() }()
	for {
		for _, topic := range topics {
			publish(t, rdb, topic, "wake", 1)
		}
		select {
		case <-closed:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// With StrictPriority no entry of the lower class is handed out while the higher class has
// entries to read: the first low message comes once every high entry was read.
func TestPriorityStrict(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	base := redistest.UniqueName(t)
	high, low := "high/"+base, "low/"+base
	publish(t, rdb, high, "h", 3000)
	publish(t, rdb, low, "l", 200)
	sub := newTestSubscriber(t, rdb, Config{Concurrency: 20, BatchSize: 20, ManualSettle: true,
		Priority: weightsOf(map[string]int{"high": 2, "low": 1}), StrictPriority: true})
	msgsH, err := sub.Subscribe(t.Context(), high)
	require.NoError(t, err)
	// The high reader's first read is under way or done before the low one subscribes: from
	// there on it is hungry or waiting, and the low reader waits for it.
	first := receive(t, msgsH, 5*time.Second)
	sub.Settle(first)
	msgsL, err := sub.Subscribe(t.Context(), low)
	require.NoError(t, err)
	in := merge(t, []<-chan *message.Message{msgsH, msgsL})
	highs, lows := 1, 0
	var lagAtFirstLow atomic.Int64
	lagAtFirstLow.Store(-1)
	for highs+lows < 3200 {
		select {
		case m := <-in:
			if m.k == 1 {
				if lows == 0 {
					g, err := rdb.XInfoGroups(context.Background(), high).Result()
					require.NoError(t, err)
					lagAtFirstLow.Store(g[0].Lag)
				}
				lows++
			} else {
				highs++
			}
			sub.Settle(m.msg)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d high and %d low messages", highs, lows)
		}
	}
	assert.Equal(t, int64(0), lagAtFirstLow.Load(), "a low entry was handed out while high entries were unread")
	assert.Equal(t, 3000, highs)
	assert.Equal(t, 200, lows)
}

// Without Priority, StrictPriority is refused.
func TestPriorityConfig(t *testing.T) {
	_, err := NewSubscriber(Config{Client: redistest.Client(t), Group: "g", StrictPriority: true})
	require.ErrorContains(t, err, "StrictPriority needs Config.Priority")
}

// levelsOf is a Config.Levels of topics named "<family>/<level>".
func levelsOf(topic string) (string, int) {
	fam, l, ok := strings.Cut(topic, "/")
	if !ok {
		return "", 0
	}
	n := 0
	for _, c := range l {
		n = n*10 + int(c-'0')
	}
	return fam, n
}

// With Levels, a family's lower level is read first: no entry of level 2 is handed out while
// level 1 has entries to read, without Priority (levels are within a class, here each
// family's own), while a topic of another family reads alongside.
func TestLevelsReadInOrder(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	base := redistest.UniqueName(t)
	l1, l2 := base+"/1", base+"/2"
	publish(t, rdb, l1, "a", 2000)
	publish(t, rdb, l2, "b", 200)
	sub := newTestSubscriber(t, rdb, Config{Concurrency: 20, BatchSize: 20, ManualSettle: true,
		Levels: levelsOf})
	msgs1, err := sub.Subscribe(t.Context(), l1)
	require.NoError(t, err)
	// Level 1's first read is under way or done before level 2 subscribes: from there on it
	// is hungry or waiting, and level 2 waits for it.
	first := receive(t, msgs1, 5*time.Second)
	sub.Settle(first)
	msgs2, err := sub.Subscribe(t.Context(), l2)
	require.NoError(t, err)
	in := merge(t, []<-chan *message.Message{msgs1, msgs2})
	ones, twos := 1, 0
	lagAtFirstTwo := int64(-1)
	for ones+twos < 2200 {
		select {
		case m := <-in:
			if m.k == 1 {
				if twos == 0 {
					g, err := rdb.XInfoGroups(context.Background(), l1).Result()
					require.NoError(t, err)
					lagAtFirstTwo = g[0].Lag
				}
				twos++
			} else {
				ones++
			}
			sub.Settle(m.msg)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d level-1 and %d level-2 messages", ones, twos)
		}
	}
	assert.Equal(t, int64(0), lagAtFirstTwo, "a level-2 entry was handed out while level-1 entries were unread")
	assert.Equal(t, 2000, ones)
	assert.Equal(t, 200, twos)
}
