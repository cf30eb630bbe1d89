package events_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/faultproxy"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// never is a fallback interval no test reaches: a watch is woken by events (or a subscription
// made again) only.
const never = time.Hour

// woken waits until wt is signalled and returns what Take says.
func woken(t *testing.T, wt *events.Watch) (string, bool) {
	t.Helper()
	select {
	case <-wt.C():
	case <-time.After(30 * time.Second):
		t.Fatal("the watch was not woken")
	}
	return wt.Take()
}

// subscribed waits until the channel's subscription is confirmed, and takes the recheck that
// confirmation gives every watch.
func subscribed(t *testing.T, w *events.Watcher, channel string, wt *events.Watch) {
	t.Helper()
	require.Eventually(t, func() bool { return w.Ready(channel) }, 30*time.Second, time.Millisecond)
	_, recheck := woken(t, wt)
	require.True(t, recheck, "a new subscription asks its watches to read their jobs")
}

// An event that names the watched job wakes its watch, with the event's status, in every mode
// that publishes: sharded and plain on Redis 7, plain on the demo's miniredis. A watch of
// another job is not woken.
func TestWatchWokenByEvent(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	mini := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = mini.Close() })
	for _, tc := range []struct {
		name string
		rdb  redis.UniversalClient
		mode events.Mode
	}{
		{"sharded", redistest.Client(t), events.Sharded},
		{"plain", redistest.Client(t), events.Plain},
		{"miniredis", mini, events.Plain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			if tc.name == "miniredis" {
				m, err := events.Detect(ctx, tc.rdb)
				require.NoError(t, err)
				require.Equal(t, events.Plain, m, "miniredis has no SPUBLISH: plain Pub/Sub")
			}
			w := events.NewWatcher(tc.rdb, events.Config{Fallback: never,
				Mode: func(context.Context) events.Mode { return tc.mode }})
			t.Cleanup(w.Close)
			ch := keys.New("ev", redistest.UniqueName(t)).Events()
			wt := w.Watch(ctx, ch, "job-1")
			defer wt.Close()
			other := w.Watch(ctx, ch, "job-2")
			defer other.Close()
			subscribed(t, w, ch, wt)
			_, _ = woken(t, other)

			msg := events.Format([]events.Event{{ID: "job-3", Status: "completed", Attempt: 1},
				{ID: "job-1", Status: "in_progress", Attempt: 1}, {ID: "job-1", Status: "completed", Attempt: 1}})
			require.NoError(t, tc.rdb.Do(ctx, tc.mode.Command(), ch, msg).Err())
			status, recheck := woken(t, wt)
			require.Equal(t, "completed", status, "the latest event's status")
			require.False(t, recheck)
			require.EqualValues(t, 2, w.Delivered())
			select {
			case <-other.C():
				t.Fatal("a watch of another job was woken")
			default:
			}

			// A malformed message is dropped, and the subscription lives on.
			require.NoError(t, tc.rdb.Do(ctx, tc.mode.Command(), ch, "garbage").Err())
			require.NoError(t, tc.rdb.Do(ctx, tc.mode.Command(), ch, "failed 2 job-1").Err())
			status, _ = woken(t, wt)
			require.Equal(t, "failed", status)
			require.EqualValues(t, 1, w.Dropped())
		})
	}
}

// A subscription dropped under the Watcher (the connection cut) is made again, and the new
// confirmation asks every watch to read its job: an event sent while it was down is lost, and
// this read is what catches it.
func TestResubscribeRechecks(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	proxy := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	w := events.NewWatcher(rdb, events.Config{Fallback: never})
	t.Cleanup(w.Close)
	ctx := t.Context()
	ch := keys.New("ev", redistest.UniqueName(t)).Events()
	wt := w.Watch(ctx, ch, "job-1")
	defer wt.Close()
	subscribed(t, w, ch, wt)

	proxy.Refuse(true)
	proxy.CutAll()
	// Sent while the subscription is down: nobody receives it. The server learns of the cut
	// connection when it reads its end, which a loaded machine may not have done yet: publish
	// once it counts no subscriber.
	direct := redistest.Client(t)
	require.Eventually(t, func() bool {
		m, err := direct.PubSubShardNumSub(ctx, ch).Result()
		return err == nil && m[ch] == 0
	}, time.Minute, 5*time.Millisecond, "the server still counts the cut subscription")
	n, err := direct.SPublish(ctx, ch, "completed 1 job-1").Result()
	require.NoError(t, err)
	require.Zero(t, n, "the message is lost")
	proxy.Refuse(false)

	status, recheck := woken(t, wt)
	require.Empty(t, status)
	require.True(t, recheck, "the subscription made again asks the watch to read its job")
	require.Zero(t, w.Delivered())

	// And events flow again on the new connection.
	require.Eventually(t, func() bool {
		n, err := direct.SPublish(ctx, ch, "completed 1 job-1").Result()
		return err == nil && n == 1
	}, 30*time.Second, time.Millisecond)
	status, _ = woken(t, wt)
	require.Equal(t, "completed", status)
}

// With no events at all (a server where the scripts publish nothing, or a message never sent),
// the fallback asks each watch to read its job every Fallback.
func TestFallbackWithoutEvents(t *testing.T) {
	t.Parallel()
	w := events.NewWatcher(redistest.Client(t), events.Config{Fallback: 10 * time.Millisecond,
		Mode: func(context.Context) events.Mode { return events.None }})
	t.Cleanup(w.Close)
	wt := w.Watch(t.Context(), "ev:{q}:events", "job-1")
	defer wt.Close()
	for range 3 {
		status, recheck := woken(t, wt)
		require.Empty(t, status)
		require.True(t, recheck)
	}
	require.Zero(t, w.Subscriptions(), "no events, no subscription")
}

// The fallback's reads are bounded per Watcher, not per watch: 500 watches with a fallback of
// 1 ms and a rate of 100 a second are signalled about 100 times a second in all, so the count
// of signals over the test's span stays under rate x span (with slack), whatever that span is
// on a loaded machine.
func TestFallbackRateBounded(t *testing.T) {
	t.Parallel()
	const n, rate = 500, 100
	w := events.NewWatcher(redistest.Client(t), events.Config{Fallback: time.Millisecond, FallbackRate: rate,
		Mode: func(context.Context) events.Mode { return events.None }})
	t.Cleanup(w.Close)
	start := time.Now()
	watches := make([]*events.Watch, n)
	for i := range watches {
		watches[i] = w.Watch(t.Context(), "ev:{q}:events", "job-"+strconv.Itoa(i))
	}
	// Gate on progress: wait for the first 50 signals, each watch's read by its own
	// goroutine, then stop counting and take the span.
	var (
		signals  atomic.Int64
		perWatch = make([]int, n) // each written by its watch's goroutine only
		fifty    = make(chan struct{})
		stop     = make(chan struct{})
		readers  sync.WaitGroup
	)
	for i, wt := range watches {
		readers.Go(func() {
			for {
				select {
				case <-wt.C():
					perWatch[i]++
					if signals.Add(1) == 50 {
						close(fifty)
					}
				case <-stop:
					return
				}
			}
		})
	}
	select {
	case <-fifty:
	case <-time.After(time.Minute):
		t.Fatal("fewer than 50 signals in a minute")
	}
	close(stop)
	readers.Wait()
	span := time.Since(start)
	for _, wt := range watches {
		wt.Close()
	}
	seen := 0
	for _, c := range perWatch {
		if c > 0 {
			seen++
		}
	}
	bound := int(span.Seconds()*rate) + 2
	require.LessOrEqual(t, int(signals.Load()), bound, "signals over %s", span)
	require.Equal(t, int(signals.Load()), seen, "each watch once before any twice: the fallback goes round")
}

// On a cluster, each queue's events arrive on the master that holds its hash tag: watches of
// queues spread over all three masters are each woken by a sharded publish.
func TestClusterEvents(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	cc := c.Client(t)
	ctx := t.Context()
	w := events.NewWatcher(cc, events.Config{Fallback: never})
	t.Cleanup(w.Close)
	require.Equal(t, events.Sharded, events.ModeOf(ctx, cc))

	// Queues until every master holds one.
	owners := map[string]string{}
	var channels []string
	for i := 0; len(owners) < len(c.Addrs) && i < 1000; i++ {
		ch := keys.New("ev", "q"+strconv.Itoa(i)).Events()
		addr, err := redistest.MasterOf(ctx, cc, ch)
		require.NoError(t, err)
		if _, ok := owners[addr]; !ok {
			owners[addr] = ch
			channels = append(channels, ch)
		}
	}
	require.Len(t, channels, len(c.Addrs))
	watches := make([]*events.Watch, len(channels))
	for i, ch := range channels {
		watches[i] = w.Watch(ctx, ch, "job-1")
		defer watches[i].Close()
		subscribed(t, w, ch, watches[i])
	}
	for i, ch := range channels {
		require.NoError(t, cc.SPublish(ctx, ch, "canceled 0 job-1").Err())
		status, _ := woken(t, watches[i])
		require.Equal(t, "canceled", status, ch)
	}
	require.Equal(t, len(channels), w.Subscriptions())
}

// Listen hands a queue's every event to a function, for a live view of the queue; stop ends it.
func TestListen(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	w := events.NewWatcher(rdb, events.Config{Fallback: never, Linger: time.Millisecond})
	t.Cleanup(w.Close)
	ctx := t.Context()
	ch := keys.New("ev", redistest.UniqueName(t)).Events()
	got := make(chan []events.Event, 10)
	stop := w.Listen(ctx, ch, func(evs []events.Event) { got <- evs })
	require.Eventually(t, func() bool { return w.Ready(ch) }, 30*time.Second, time.Millisecond)
	require.NoError(t, rdb.SPublish(ctx, ch, "in_progress 1 a\ncompleted 1 b").Err())
	select {
	case evs := <-got:
		require.Equal(t, []events.Event{{ID: "a", Status: "in_progress", Attempt: 1}, {ID: "b", Status: "completed", Attempt: 1}}, evs)
	case <-time.After(30 * time.Second):
		t.Fatal("no events")
	}
	stop()
	stop()
	require.Eventually(t, func() bool { return w.Subscriptions() == 0 }, 30*time.Second, time.Millisecond,
		"the subscription ends after its linger once nobody listens")
}

// ListenGaps tells its caller of every confirmation of the subscription: the first, and the
// one after a dropped connection, while which an event was lost; a listen that joins a
// subscription confirmed earlier is told at once. Events after a gap reach fn again.
func TestListenGaps(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	proxy := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	w := events.NewWatcher(rdb, events.Config{Fallback: never})
	t.Cleanup(w.Close)
	ctx := t.Context()
	ch := keys.New("ev", redistest.UniqueName(t)).Events()
	got := make(chan []events.Event, 10)
	gaps := make(chan struct{}, 10)
	gapped := func(why string) {
		t.Helper()
		select {
		case <-gaps:
		case <-time.After(30 * time.Second):
			t.Fatal("no gap: " + why)
		}
	}
	stop := w.ListenGaps(ctx, ch, func(evs []events.Event) { got <- evs }, func() { gaps <- struct{}{} })
	defer stop()
	gapped("the first confirmation")
	late := make(chan struct{}, 1)
	stopLate := w.ListenGaps(ctx, ch, func([]events.Event) {}, func() { late <- struct{}{} })
	select {
	case <-late:
	case <-time.After(30 * time.Second):
		t.Fatal("a listen joining a confirmed subscription is not told")
	}
	stopLate()

	proxy.Refuse(true)
	proxy.CutAll()
	direct := redistest.Client(t)
	n, err := direct.SPublish(ctx, ch, "canceled 1 job-1").Result()
	require.NoError(t, err)
	require.Zero(t, n, "the message is lost")
	proxy.Refuse(false)
	gapped("the subscription made again")

	require.Eventually(t, func() bool {
		n, err := direct.SPublish(ctx, ch, "canceled 1 job-2").Result()
		return err == nil && n == 1
	}, 30*time.Second, time.Millisecond)
	select {
	case evs := <-got:
		require.Equal(t, []events.Event{{ID: "job-2", Status: "canceled", Attempt: 1}}, evs)
	case <-time.After(30 * time.Second):
		t.Fatal("no events after the gap")
	}
}
