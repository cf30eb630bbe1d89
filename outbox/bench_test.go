package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/pgtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/outbox"
	"github.com/conveyorq/conveyor/pipeline"
)

// The outbox's figures (docs/BENCHMARKS.md, "Issue 21: transactional outbox"):
//
//	go test -run '^$' -bench 'BenchmarkRelay' -benchtime 20000x ./outbox/
//
// BenchmarkRelayThroughput: b.N rows committed beforehand (transactions of 100), then one
// relay sends them all: rows/s. BenchmarkRelayLag: b.N transactions of one row each, from 1 or 4
// goroutines, while a relay runs: the lag from each commit's return to Redis's answer to the
// script call that carried the row's job (a hook on the relay's Redis client), p50 and p99.
// Its "paced" case commits one row every 5 ms (200 a second), the relay idle in between: the
// lag of a quiet system, the wake-up by the commit's notification and one batch.

// acked records, for each id it is told of, when a Redis command carrying it was answered.
type acked struct {
	mu    sync.Mutex
	since map[string]time.Time // id -> commit
	lags  []time.Duration
}

func (a *acked) note(cmds []redis.Cmder) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range cmds {
		for _, arg := range c.Args() {
			s, ok := arg.(string)
			if !ok {
				continue
			}
			if t, ok := a.since[s]; ok {
				// Before the commit returned (t is the placeholder): no lag to speak of.
				a.lags = append(a.lags, max(now.Sub(t), 0))
				delete(a.since, s)
			}
		}
	}
}

func (a *acked) DialHook(next redis.DialHook) redis.DialHook { return next }
func (a *acked) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		a.note([]redis.Cmder{cmd})
		return err
	}
}
func (a *acked) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		a.note(cmds)
		return err
	}
}

func benchSetup(b *testing.B) (string, *sql.DB, *redis.Client) {
	url := pgtest.Shared(b).NewDatabase(b)
	db, err := sql.Open("pgx", url)
	require.NoError(b, err)
	b.Cleanup(func() { _ = db.Close() })
	require.NoError(b, outbox.Migrate(context.Background(), db))
	return url, db, redistest.Start(b).Client(b)
}

func startRelay(b *testing.B, url string, rdb *redis.Client) *outbox.Relay {
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(b, err)
	r, err := outbox.NewRelay(outbox.RelayConfig{Postgres: url, Client: client})
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done; _ = r.Close() })
	return r
}

func BenchmarkRelayThroughput(b *testing.B) {
	url, db, rdb := benchSetup(b)
	ctx := context.Background()
	for i := 0; i < b.N; i += 100 {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(b, err)
		for range min(100, b.N-i) {
			_, err := outbox.Enqueue(ctx, tx, "bench", pipeline.Task{Type: "t", Payload: []byte(`{"n":1}`)})
			require.NoError(b, err)
		}
		require.NoError(b, tx.Commit())
	}
	b.ResetTimer()
	start := time.Now()
	r := startRelay(b, url, rdb)
	for r.Stats().Relayed < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rows/s")
}

func BenchmarkRelayLag(b *testing.B) {
	b.Run("paced", func(b *testing.B) { benchLag(b, 1, 5*time.Millisecond) })
	for _, writers := range []int{1, 4} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) { benchLag(b, writers, 0) })
	}
}

// benchLag commits b.N rows from writers goroutines, each commit every pace (0: at once).
func benchLag(b *testing.B, writers int, pace time.Duration) {
	url, db, rdb := benchSetup(b)
	a := &acked{since: make(map[string]time.Time)}
	rdb.AddHook(a)
	r := startRelay(b, url, rdb)
	ctx := context.Background()
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var tick <-chan time.Time
			if pace > 0 {
				t := time.NewTicker(pace)
				defer t.Stop()
				tick = t.C
			}
			for i := w; i < b.N; i += writers {
				if tick != nil {
					<-tick
				}
				id := pipeline.NewID()
				tx, err := db.BeginTx(ctx, nil)
				if err == nil {
					_, err = outbox.Enqueue(ctx, tx, "bench", pipeline.Task{Type: "t"}, outbox.WithID(id))
				}
				if err != nil {
					b.Error(err)
					return
				}
				// Noted before the commit, timed from its return: the relay cannot see the
				// row before the commit, and the note must be there when it sends it.
				a.mu.Lock()
				a.since[id] = time.Now().Add(time.Hour)
				a.mu.Unlock()
				if err := tx.Commit(); err != nil {
					b.Error(err)
					return
				}
				a.mu.Lock()
				if _, ok := a.since[id]; ok {
					a.since[id] = time.Now()
				}
				a.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for r.Stats().Relayed < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	a.mu.Lock()
	defer a.mu.Unlock()
	require.Len(b, a.lags, b.N)
	slices.Sort(a.lags)
	b.ReportMetric(float64(a.lags[len(a.lags)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(a.lags[len(a.lags)*99/100].Microseconds())/1000, "p99-ms")
}
