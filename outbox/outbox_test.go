package outbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/pgtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/outbox"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testBundle is what a test works with: a database of its own with the outbox table, a Redis
// of its own, a Client over it and a queue.
type testBundle struct {
	pgURL  string
	db     *sql.DB
	redis  *redistest.Server
	rdb    *redis.Client
	client *pipeline.Client
	queue  string
}

type setupOpts struct {
	redisArgs []string // redis-server arguments (persistence for a restart)
}

func setup(t *testing.T, opts ...setupOpts) *testBundle {
	t.Helper()
	var o setupOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	url := pgtest.Shared(t).NewDatabase(t)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, outbox.Migrate(context.Background(), db))
	srv := redistest.Start(t, redistest.WithArgs(o.redisArgs...))
	rdb := srv.Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	return &testBundle{pgURL: url, db: db, redis: srv, rdb: rdb, client: client, queue: "orders"}
}

// relay starts a relay over the bundle's database and Redis, stopped (and its Run waited
// for) in t.Cleanup.
func (b *testBundle) relay(t *testing.T, cfg outbox.RelayConfig) *outbox.Relay {
	t.Helper()
	cfg.Postgres, cfg.Client = b.pgURL, b.client
	r, err := outbox.NewRelay(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, r.Close())
	})
	return r
}

// enqueue commits one transaction that enqueues each task of tasks (with opts) and returns
// the ids.
func (b *testBundle) enqueue(t *testing.T, n int, opts func(i int) []outbox.Option) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	ids := make([]string, n)
	for i := range n {
		var o []outbox.Option
		if opts != nil {
			o = opts(i)
		}
		ids[i], err = outbox.Enqueue(ctx, tx, b.queue, pipeline.Task{Type: "email", Payload: []byte(fmt.Sprint(i))}, o...)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit())
	return ids
}

// rows counts the outbox table's rows, set aside or not.
func (b *testBundle) rows(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM `+outbox.Table).Scan(&n))
	return n
}

// waitEmpty waits until the relay has sent and deleted every row.
func (b *testBundle) waitEmpty(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { return b.rows(t) == 0 }, time.Minute, 10*time.Millisecond)
}

// requireJobs checks that each id is a job of the queue, and that the queue holds no other.
func (b *testBundle) requireJobs(t *testing.T, ids []string) {
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		_, err := b.client.Get(ctx, b.queue, id)
		require.NoError(t, err, "job %s", id)
	}
	st, err := b.client.Stats(ctx, b.queue)
	require.NoError(t, err)
	require.EqualValues(t, len(ids), st.Enqueued, "jobs created")
	require.EqualValues(t, len(ids), st.Queued+st.Scheduled, "jobs waiting")
}

func TestCommitQueuesTheJob(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	b.relay(t, outbox.RelayConfig{})
	runAt := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	id, err := outbox.Enqueue(ctx, tx, b.queue, pipeline.Task{Type: "email", Payload: []byte(`{"order":1}`), Metadata: map[string]string{"a": "1"}},
		outbox.WithID("order-1"), outbox.WithMaxRetries(2), outbox.WithPriority(3), outbox.WithTimeout(1500*time.Millisecond),
		outbox.WithMetadata(map[string]string{"b": "2"}), outbox.WithRunAt(runAt), outbox.WithGroup("tenant-a"))
	require.NoError(t, err)
	require.Equal(t, "order-1", id)
	require.NoError(t, tx.Commit())
	var j *pipeline.Job
	require.Eventually(t, func() bool {
		j, err = b.client.Get(ctx, b.queue, id)
		return err == nil
	}, time.Minute, 10*time.Millisecond)
	require.Equal(t, "email", j.Type)
	require.Equal(t, `{"order":1}`, string(j.Payload))
	require.Equal(t, map[string]string{"a": "1", "b": "2"}, j.Metadata)
	require.Equal(t, 2, j.MaxRetries)
	require.Equal(t, 3, j.Priority)
	require.Equal(t, "tenant-a", j.Group)
	require.Equal(t, 1500*time.Millisecond, j.Timeout)
	require.True(t, j.RunAt.Equal(runAt), "run at %s, want %s", j.RunAt, runAt)
	require.Equal(t, status.Scheduled, j.Status)
	b.waitEmpty(t)
}

func TestGeneratedID(t *testing.T) {
	b := setup(t)
	r := b.relay(t, outbox.RelayConfig{})
	ids := b.enqueue(t, 3, nil)
	b.waitEmpty(t)
	b.requireJobs(t, ids)
	require.Equal(t, outbox.RelayStats{Relayed: 3}, r.Stats())
}

func TestRollbackPublishesNothing(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	b.relay(t, outbox.RelayConfig{})
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = outbox.Enqueue(ctx, tx, b.queue, pipeline.Task{Type: "email"}, outbox.WithID("rolled-back"))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())
	// A committed row after it: once it is queued, the relay has looked past the other.
	ids := b.enqueue(t, 1, nil)
	b.waitEmpty(t)
	b.requireJobs(t, ids)
	_, err = b.client.Get(ctx, b.queue, "rolled-back")
	require.ErrorIs(t, err, pipeline.ErrNotFound)
}

func TestEnqueueValidates(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		queue string
		task  pipeline.Task
		opts  []outbox.Option
		want  error
	}{
		{"bad queue", "no spaces", pipeline.Task{Type: "t"}, nil, pipeline.ErrInvalid},
		{"no type", "q", pipeline.Task{}, nil, pipeline.ErrInvalid},
		{"bad id", "q", pipeline.Task{Type: "t"}, []outbox.Option{outbox.WithID("a b")}, pipeline.ErrInvalid},
		{"negative delay", "q", pipeline.Task{Type: "t"}, []outbox.Option{outbox.WithDelay(-time.Second)}, pipeline.ErrInvalid},
		{"priority", "q", pipeline.Task{Type: "t"}, []outbox.Option{outbox.WithPriority(9)}, pipeline.ErrInvalid},
		{"retries", "q", pipeline.Task{Type: "t"}, []outbox.Option{outbox.WithMaxRetries(-1)}, pipeline.ErrInvalid},
		{"pipeline options", "q", pipeline.Task{Type: "t", Opts: []pipeline.Option{pipeline.WithPriority(2)}}, nil, pipeline.ErrInvalid},
		{"too large", "q", pipeline.Task{Type: "t", Payload: make([]byte, 1<<20+1)}, nil, pipeline.ErrPayloadTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := outbox.Enqueue(ctx, b.db, tc.queue, tc.task, tc.opts...)
			require.ErrorIs(t, err, tc.want)
			require.Zero(t, b.rows(t))
		})
	}
}

func TestEnqueueSameIDAbsorbed(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	for range 2 {
		_, err := outbox.Enqueue(ctx, b.db, b.queue, pipeline.Task{Type: "email"}, outbox.WithID("twice"))
		require.NoError(t, err)
	}
	require.Equal(t, 1, b.rows(t))
}

// A relay that sent a batch and died before deleting it: the next relay sends the rows again
// and the queue absorbs them.
func TestResendAbsorbed(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	ids := b.enqueue(t, 5, nil)
	for i, id := range ids[:3] {
		_, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "email", Payload: []byte(fmt.Sprint(i))}, pipeline.WithID(id))
		require.NoError(t, err)
	}
	r := b.relay(t, outbox.RelayConfig{})
	b.waitEmpty(t)
	b.requireJobs(t, ids)
	require.Equal(t, outbox.RelayStats{Relayed: 5, Duplicates: 3}, r.Stats())
}

// A row whose id names a job with another payload is set aside with the reason; the others
// of its batch are sent.
func TestConflictSetAside(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	ids := b.enqueue(t, 3, nil)
	_, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "email", Payload: []byte("other")}, pipeline.WithID(ids[1]))
	require.NoError(t, err)
	r := b.relay(t, outbox.RelayConfig{})
	require.Eventually(t, func() bool { return r.Stats().Relayed == 2 }, time.Minute, 10*time.Millisecond)
	require.Equal(t, outbox.RelayStats{Relayed: 2, Failed: 1}, r.Stats())
	var id, reason string
	require.NoError(t, b.db.QueryRow(`SELECT id, error FROM `+outbox.Table).Scan(&id, &reason))
	require.Equal(t, ids[1], id)
	require.Contains(t, reason, "different payload")
	pending, err := r.Pending(ctx)
	require.NoError(t, err)
	require.Zero(t, pending)
}

func TestPgxTx(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.pgURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = outbox.Enqueue(ctx, outbox.Pgx(tx), b.queue, pipeline.Task{Type: "email"}, outbox.WithID("via-pgx"))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	b.relay(t, outbox.RelayConfig{})
	b.waitEmpty(t)
	b.requireJobs(t, []string{"via-pgx"})
}

// Several relays at once: every row becomes one job, sent by one relay.
func TestTwoRelays(t *testing.T) {
	b := setup(t)
	const n = 400
	r1 := b.relay(t, outbox.RelayConfig{BatchSize: 10})
	r2 := b.relay(t, outbox.RelayConfig{BatchSize: 10})
	var ids []string
	for range n / 20 {
		ids = append(ids, b.enqueue(t, 20, nil)...)
	}
	b.waitEmpty(t)
	b.requireJobs(t, ids)
	s1, s2 := r1.Stats(), r2.Stats()
	require.EqualValues(t, n, s1.Relayed+s2.Relayed, "%+v %+v", s1, s2)
	require.Zero(t, s1.Duplicates+s2.Duplicates, "a row sent by both relays")
}

// Redis killed and restarted (with its append-only file) while the relay sends: every row is
// one job, none lost, none twice.
func TestRedisRestart(t *testing.T) {
	b := setup(t, setupOpts{redisArgs: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	r := b.relay(t, outbox.RelayConfig{BatchSize: 20, PollInterval: 10 * time.Millisecond})
	var ids []string
	ids = append(ids, b.enqueue(t, 100, nil)...)
	require.Eventually(t, func() bool { return r.Stats().Relayed > 0 }, time.Minute, time.Millisecond)
	require.NoError(t, b.redis.Kill())
	ids = append(ids, b.enqueue(t, 100, nil)...) // written while Redis is down
	require.NoError(t, b.redis.Restart())
	ids = append(ids, b.enqueue(t, 100, nil)...)
	b.waitEmpty(t)
	b.requireJobs(t, ids)
	require.EqualValues(t, len(ids), r.Stats().Relayed)
}

func TestNewRelayValidates(t *testing.T) {
	_, err := outbox.NewRelay(outbox.RelayConfig{})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	_, err = outbox.NewRelay(outbox.RelayConfig{Postgres: "postgres://x/y", BatchSize: -1, Client: &pipeline.Client{}})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
}

// The relay wakes on the commit's notification, not on its poll (an hour here).
func TestNotifyWakesRelay(t *testing.T) {
	b := setup(t)
	r := b.relay(t, outbox.RelayConfig{PollInterval: time.Hour})
	// Its first look (at start) finds nothing; from then on only a notification wakes it.
	for i := range 3 {
		ids := b.enqueue(t, 1, nil)
		require.Eventually(t, func() bool { return r.Stats().Relayed == int64(i+1) }, time.Minute, time.Millisecond)
		_, err := b.client.Get(context.Background(), b.queue, ids[0])
		require.NoError(t, err)
	}
}

// A queue the relay cannot send to (RequireQueues, and it does not exist) keeps its rows; the
// other queues' rows of the same batch are sent; once the queue exists, its rows follow.
func TestQueueFailureKeepsItsRows(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	insp, err := pipeline.NewInspector(b.rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	_, err = insp.CreateQueue(ctx, b.queue, pipeline.QueueOptions{})
	require.NoError(t, err)
	strict, err := pipeline.NewClient(b.rdb, pipeline.ClientConfig{RequireQueues: true})
	require.NoError(t, err)
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = outbox.Enqueue(ctx, tx, "later", pipeline.Task{Type: "t"}, outbox.WithID("to-later"))
	require.NoError(t, err)
	_, err = outbox.Enqueue(ctx, tx, b.queue, pipeline.Task{Type: "t"}, outbox.WithID("to-orders"))
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	b.client = strict
	r := b.relay(t, outbox.RelayConfig{PollInterval: 10 * time.Millisecond})
	require.Eventually(t, func() bool { return r.Stats().Relayed == 1 }, time.Minute, time.Millisecond)
	b.requireJobs(t, []string{"to-orders"})
	require.Equal(t, 1, b.rows(t))
	_, err = insp.CreateQueue(ctx, "later", pipeline.QueueOptions{})
	require.NoError(t, err)
	b.waitEmpty(t)
	_, err = strict.Get(ctx, "later", "to-later")
	require.NoError(t, err)
}

// The caller's span (the request whose transaction writes the row) is the job's trace
// context, however late the relay sends it; a task that carries its own keeps it.
func TestEnqueueCarriesTheCallersTrace(t *testing.T) {
	b := setup(t)
	b.relay(t, outbox.RelayConfig{})
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6},
		TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	own := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	traced, err := outbox.Enqueue(ctx, tx, b.queue, pipeline.Task{Type: "email"})
	require.NoError(t, err)
	kept, err := outbox.Enqueue(ctx, tx, b.queue, pipeline.Task{Type: "email", Metadata: map[string]string{"traceparent": own}})
	require.NoError(t, err)
	plain, err := outbox.Enqueue(context.Background(), tx, b.queue, pipeline.Task{Type: "email"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	get := func(id string) *pipeline.Job {
		var j *pipeline.Job
		require.Eventually(t, func() bool {
			j, err = b.client.Get(context.Background(), b.queue, id)
			return err == nil
		}, time.Minute, 10*time.Millisecond)
		return j
	}
	require.Equal(t, "00-01020300000000000000000000000000-0405060000000000-01", get(traced).Metadata["traceparent"])
	require.Equal(t, own, get(kept).Metadata["traceparent"])
	require.Empty(t, get(plain).Metadata)
}

// logLines is a zerolog writer that hands each line to a channel, for a test to wait on.
type logLines chan string

func (l logLines) Write(p []byte) (int, error) {
	select {
	case l <- string(p):
	default:
	}
	return len(p), nil
}

// A relay started before its PostgreSQL waits for it instead of exiting (a container's start
// order): it logs once, retries, and relays once the database answers. It failed on the old
// code, whose Run returned Migrate's connection error.
func TestRelayWaitsForPostgres(t *testing.T) {
	b := setup(t)
	u, err := url.Parse(b.pgURL)
	require.NoError(t, err)
	// A port nothing listens on yet; later a forwarder to the real server opens on it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().String()
	require.NoError(t, ln.Close())
	target := u.Host
	u.Host = port
	logs := make(logLines, 100)
	r, err := outbox.NewRelay(outbox.RelayConfig{Postgres: u.String(), Client: b.client, Logger: zerolog.New(logs)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { _ = r.Close() })
	for waiting := true; waiting; {
		select {
		case line := <-logs:
			waiting = !strings.Contains(line, "relay cannot reach PostgreSQL")
		case err := <-done:
			t.Fatalf("Run returned before PostgreSQL could be reached: %v", err)
		}
	}
	fwd, err := net.Listen("tcp", port)
	require.NoError(t, err)
	t.Cleanup(func() { _ = fwd.Close() })
	go func() {
		for {
			c, err := fwd.Accept()
			if err != nil {
				return
			}
			go func() {
				s, err := net.Dial("tcp", target)
				if err != nil {
					_ = c.Close()
					return
				}
				go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
				_, _ = io.Copy(c, s)
				_ = c.Close()
			}()
		}
	}()
	ids := b.enqueue(t, 3, nil)
	b.waitEmpty(t)
	b.requireJobs(t, ids)
	cancel()
	require.NoError(t, <-done)
}

// A row's limit key, unique key and retention are the job's: each is stored in the job's
// record, where the limits, the unique key's release and the expiry after finishing read them.
func TestRowCarriesLimitUniqueRetention(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	b.relay(t, outbox.RelayConfig{})
	ids := b.enqueue(t, 1, func(int) []outbox.Option {
		return []outbox.Option{outbox.WithLimitKey("tenant-7"), outbox.WithUnique("order-7", time.Hour),
			outbox.WithRetention(2 * time.Hour)}
	})
	b.waitEmpty(t)
	b.requireJobs(t, ids)
	q := keys.New(b.client.Prefix(), b.queue)
	rec, err := b.rdb.HGetAll(ctx, q.Job(ids[0])).Result()
	require.NoError(t, err)
	require.Equal(t, "tenant-7", rec[keys.FieldLimitKey], "limit key")
	require.Equal(t, q.Unique("order-7"), rec[keys.FieldUnique], "unique key")
	require.Equal(t, "3600000", rec[keys.FieldUniqueTTL], "unique key's TTL")
	require.Equal(t, "7200000", rec[keys.FieldRetention], "retention")
	holder, err := b.rdb.Get(ctx, q.Unique("order-7")).Result()
	require.NoError(t, err)
	require.Equal(t, ids[0], holder, "the unique key names the job")
}

// An Enqueue into a database where the table was never created says how to create it.
func TestEnqueueBeforeMigrateSaysHow(t *testing.T) {
	db, err := sql.Open("pgx", pgtest.Shared(t).NewDatabase(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	_, err = outbox.Enqueue(context.Background(), db, "orders", pipeline.Task{Type: "email"})
	require.ErrorIs(t, err, outbox.ErrNoTable)
	require.Contains(t, err.Error(), "outbox.Migrate")
	require.Contains(t, err.Error(), "conveyor relay")
	require.Contains(t, err.Error(), `relation "conveyor_outbox" does not exist`, "PostgreSQL's own words stay")
}

// A relay stopped while it waits for its PostgreSQL says it never connected: no "relay
// started" before its "stopped".
func TestRelayStoppedBeforeConnecting(t *testing.T) {
	b := setup(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	u, err := url.Parse(b.pgURL)
	require.NoError(t, err)
	u.Host = port
	logs := make(logLines, 100)
	r, err := outbox.NewRelay(outbox.RelayConfig{Postgres: u.String(), Client: b.client, Logger: zerolog.New(logs)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var seen []string
	for waiting := true; waiting; {
		line := <-logs
		seen = append(seen, line)
		waiting = !strings.Contains(line, "relay cannot reach PostgreSQL")
	}
	cancel()
	require.NoError(t, <-done)
	close(logs)
	for line := range logs {
		seen = append(seen, line)
	}
	all := strings.Join(seen, "")
	require.NotContains(t, all, "relay started")
	require.Contains(t, all, "relay stopped before connecting to PostgreSQL")
}

// heldBackCase is a queue refusal that must not hold back the rows behind it.
type heldBackCase struct {
	name   string
	client pipeline.ClientConfig // the relay's Client
	reason string                // outbox.Reason*
}

var heldBackCases = []heldBackCase{
	// The queue cap reached: the rows' queues are new and there is room for none.
	{"TooManyQueues", pipeline.ClientConfig{MaxQueues: 1}, "too_many_queues"},
	// Publishing does not create queues, and theirs does not exist.
	{"QueueNotFound", pipeline.ClientConfig{RequireQueues: true}, "queue_not_found"},
}

// Rows the relay cannot send, more than a batch of them and the oldest of the table, do not
// hold back the rows of a queue it can send to. It failed on the old code, whose every batch
// locked the same oldest 500 rows: 0 of the 10 were sent.
func TestRowsThatCannotBeSentHoldBackNoOthers(t *testing.T) {
	for _, tc := range heldBackCases {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			ctx := context.Background()
			insp, err := pipeline.NewInspector(b.rdb, pipeline.InspectorConfig{})
			require.NoError(t, err)
			_, err = insp.CreateQueue(ctx, b.queue, pipeline.QueueOptions{})
			require.NoError(t, err)
			b.client, err = pipeline.NewClient(b.rdb, tc.client)
			require.NoError(t, err)
			const bad = 600 // more than a batch (500)
			tx, err := b.db.BeginTx(ctx, nil)
			require.NoError(t, err)
			for i := range bad {
				_, err := outbox.Enqueue(ctx, tx, fmt.Sprintf("over-%d", i%3), pipeline.Task{Type: "email"})
				require.NoError(t, err)
			}
			require.NoError(t, tx.Commit())
			ids := b.enqueue(t, 10, nil)
			logs := make(logLines, 1000)
			var mu sync.Mutex
			heldBy := map[string]int{}
			r := b.relay(t, outbox.RelayConfig{Logger: zerolog.New(logs), OnBatch: func(rb outbox.RelayBatch) {
				mu.Lock()
				defer mu.Unlock()
				for k, v := range rb.HeldBackBy {
					heldBy[k] += v
				}
			}})
			require.Eventually(t, func() bool { return b.rows(t) == bad }, time.Minute, 10*time.Millisecond)
			b.requireJobs(t, ids)
			// Each held-back row says why and when it is tried again; none is set aside.
			require.Eventually(t, func() bool { return r.Stats().HeldBack >= bad }, time.Minute, 10*time.Millisecond)
			var n, tried, later int
			var reason string
			require.NoError(t, b.db.QueryRow(`SELECT count(*), count(*) FILTER (WHERE attempts > 0 AND failed_at IS NOT NULL),
count(*) FILTER (WHERE retry_at > failed_at), max(last_error) FROM `+outbox.Table+` WHERE error IS NULL`).Scan(&n, &tried, &later, &reason))
			require.Equal(t, bad, n, "none set aside")
			require.Equal(t, bad, tried, "every row tried, and held back")
			require.Equal(t, bad, later, "every row due after its failure")
			require.Contains(t, reason, "enqueue to over-")
			mu.Lock()
			require.Equal(t, map[string]int{tc.reason: int(r.Stats().HeldBack)}, heldBy)
			mu.Unlock()
			for waiting := true; waiting; {
				line := <-logs
				waiting = !(strings.Contains(line, `"level":"warn"`) && strings.Contains(line, "outbox rows held back") &&
					strings.Contains(line, `"reason":"`+tc.reason+`"`) && strings.Contains(line, `"over-0"`))
			}
			if tc.reason == outbox.ReasonQueueNotFound {
				// Once the queues exist, their rows follow: the relay wakes when their backoff ends.
				insp, err := pipeline.NewInspector(b.rdb, pipeline.InspectorConfig{})
				require.NoError(t, err)
				for i := range 3 {
					_, err = insp.CreateQueue(ctx, fmt.Sprintf("over-%d", i), pipeline.QueueOptions{})
					require.NoError(t, err)
				}
				require.Eventually(t, func() bool { return r.Stats().Relayed == int64(bad+len(ids)) }, time.Minute, 10*time.Millisecond)
				require.Zero(t, b.rows(t))
			}
		})
	}
}

// Redis not answering at all holds back no queue: the rows stay as they were (no attempt
// written to each at every backoff) and the relay backs off as a whole; once Redis is back,
// they are sent.
func TestRedisDownHoldsBackNoQueue(t *testing.T) {
	b := setup(t, setupOpts{redisArgs: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	logs := make(logLines, 1000)
	require.NoError(t, b.redis.Kill())
	ids := b.enqueue(t, 20, nil)
	r := b.relay(t, outbox.RelayConfig{Logger: zerolog.New(logs), PollInterval: 10 * time.Millisecond})
	for waiting := true; waiting; {
		waiting = !strings.Contains(<-logs, "relay failing")
	}
	var tried int
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM `+outbox.Table+` WHERE attempts > 0 OR retry_at > '-infinity'`).Scan(&tried))
	require.Zero(t, tried, "rows held back while Redis was away")
	require.Zero(t, r.Stats().HeldBack)
	require.NoError(t, b.redis.Restart())
	b.waitEmpty(t)
	b.requireJobs(t, ids)
}

// oldSchema is the table, index and trigger as Migrate made them before rows could be held
// back (attempts, retry_at, last_error, failed_at; the index on seq alone).
var oldSchema = []string{
	`CREATE TABLE conveyor_outbox (
	seq        BIGINT GENERATED ALWAYS AS IDENTITY,
	id         TEXT PRIMARY KEY,
	queue      TEXT NOT NULL,
	type       TEXT NOT NULL,
	payload    BYTEA NOT NULL DEFAULT ''::bytea,
	spec       JSONB NOT NULL DEFAULT '{}'::jsonb,
	created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
	error      TEXT
)`,
	`CREATE INDEX conveyor_outbox_pending ON conveyor_outbox (seq) WHERE error IS NULL`,
	`CREATE OR REPLACE FUNCTION conveyor_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('conveyor_outbox', '');
	RETURN NULL;
END
$$`,
	`CREATE OR REPLACE TRIGGER conveyor_outbox_notify AFTER INSERT ON conveyor_outbox
	FOR EACH STATEMENT EXECUTE FUNCTION conveyor_outbox_notify()`,
}

// A table an older Migrate made, with rows in it (one set aside), is upgraded by Migrate, once
// and again, and its rows are relayed.
func TestMigrateUpgradesOldTable(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	_, err := b.db.Exec(`DROP TABLE ` + outbox.Table)
	require.NoError(t, err)
	for _, q := range oldSchema {
		_, err := b.db.Exec(q)
		require.NoError(t, err)
	}
	_, err = b.db.Exec(`INSERT INTO conveyor_outbox (id, queue, type) VALUES ('old-1', 'orders', 'email'), ('old-2', 'orders', 'email')`)
	require.NoError(t, err)
	_, err = b.db.Exec(`INSERT INTO conveyor_outbox (id, queue, type, error) VALUES ('old-bad', 'orders', 'email', 'set aside before')`)
	require.NoError(t, err)
	for range 2 {
		require.NoError(t, outbox.Migrate(ctx, b.db))
	}
	var cols []string
	res, err := b.db.Query(`SELECT column_name FROM information_schema.columns WHERE table_name = $1 ORDER BY ordinal_position`, outbox.Table)
	require.NoError(t, err)
	for res.Next() {
		var c string
		require.NoError(t, res.Scan(&c))
		cols = append(cols, c)
	}
	require.NoError(t, res.Err())
	require.Equal(t, []string{"seq", "id", "queue", "type", "payload", "spec", "created_at", "error",
		"attempts", "retry_at", "last_error", "failed_at"}, cols)
	var indexes []string
	res, err = b.db.Query(`SELECT indexname FROM pg_indexes WHERE tablename = $1 ORDER BY indexname`, outbox.Table)
	require.NoError(t, err)
	for res.Next() {
		var c string
		require.NoError(t, res.Scan(&c))
		indexes = append(indexes, c)
	}
	require.NoError(t, res.Err())
	require.Equal(t, []string{outbox.Table + "_due", outbox.Table + "_pkey"}, indexes)
	b.relay(t, outbox.RelayConfig{})
	require.Eventually(t, func() bool { return b.rows(t) == 1 }, time.Minute, 10*time.Millisecond)
	b.requireJobs(t, []string{"old-1", "old-2"})
	var left string
	require.NoError(t, b.db.QueryRow(`SELECT id FROM `+outbox.Table).Scan(&left))
	require.Equal(t, "old-bad", left)
}

// A relay that held a queue back looks again when the queue's backoff ends, not a poll later
// (an hour here): the queue created meanwhile gets its rows.
func TestHeldBackRowsTriedWhenBackoffEnds(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	var err error
	b.client, err = pipeline.NewClient(b.rdb, pipeline.ClientConfig{RequireQueues: true})
	require.NoError(t, err)
	ids := b.enqueue(t, 3, nil)
	r := b.relay(t, outbox.RelayConfig{PollInterval: time.Hour})
	require.Eventually(t, func() bool { return r.Stats().HeldBack >= 3 }, time.Minute, time.Millisecond)
	insp, err := pipeline.NewInspector(b.rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	_, err = insp.CreateQueue(ctx, b.queue, pipeline.QueueOptions{})
	require.NoError(t, err)
	b.waitEmpty(t)
	b.requireJobs(t, ids)
}

// A queue Redis fails for while it answers a PING (here its stream key holds a string, as a
// stand-in for its cluster node being down) is held back with reason "redis"; the rows of
// other queues go on. It failed on the old code: batches of 5 took the same 5 rows of the
// broken queue for ever.
func TestQueueRedisFailsForIsHeldBack(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	broken := keys.New(b.client.Prefix(), "broken")
	require.NoError(t, b.rdb.Set(ctx, broken.Stream(), "not a stream", 0).Err())
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	for range 5 {
		_, err := outbox.Enqueue(ctx, tx, "broken", pipeline.Task{Type: "email"})
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit())
	ids := b.enqueue(t, 5, nil)
	var mu sync.Mutex
	heldBy := map[string]int{}
	r := b.relay(t, outbox.RelayConfig{BatchSize: 5, PollInterval: 10 * time.Millisecond, OnBatch: func(rb outbox.RelayBatch) {
		mu.Lock()
		defer mu.Unlock()
		for k, v := range rb.HeldBackBy {
			heldBy[k] += v
		}
	}})
	require.Eventually(t, func() bool { return r.Stats().Relayed == 5 }, time.Minute, time.Millisecond)
	b.requireJobs(t, ids)
	mu.Lock()
	require.Equal(t, []string{outbox.ReasonRedis}, slices.Collect(maps.Keys(heldBy)))
	mu.Unlock()
	var reason string
	require.NoError(t, b.db.QueryRow(`SELECT max(last_error) FROM `+outbox.Table+` WHERE queue = 'broken' AND error IS NULL`).Scan(&reason))
	require.Contains(t, reason, "WRONGTYPE")
}

// A bounded queue at its bound (pipeline.ErrQueueFull) takes the rows it has room for; the
// relay deletes those and holds the others back, with reason queue_full, as it holds back any
// refused queue, and sends them once there is room.
func TestQueueFullRowsHeldBackThenSent(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	insp, err := pipeline.NewInspector(b.rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	_, err = insp.CreateQueue(ctx, b.queue, pipeline.QueueOptions{})
	require.NoError(t, err)
	two := 2
	_, err = insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{MaxWaiting: &two})
	require.NoError(t, err)
	ids := b.enqueue(t, 5, nil)
	var mu sync.Mutex
	heldBy := map[string]int{}
	r := b.relay(t, outbox.RelayConfig{OnBatch: func(rb outbox.RelayBatch) {
		mu.Lock()
		defer mu.Unlock()
		for k, v := range rb.HeldBackBy {
			heldBy[k] += v
		}
	}})
	require.Eventually(t, func() bool { return r.Stats().HeldBack >= 3 }, time.Minute, time.Millisecond)
	require.Equal(t, 3, b.rows(t), "the rows the queue took are deleted, the others kept")
	var last string
	require.NoError(t, b.db.QueryRow(`SELECT max(last_error) FROM `+outbox.Table+` WHERE error IS NULL`).Scan(&last))
	require.Contains(t, last, "queue full")
	mu.Lock()
	require.Equal(t, []string{outbox.ReasonQueueFull}, slices.Collect(maps.Keys(heldBy)))
	mu.Unlock()

	five := 5
	_, err = insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{MaxWaiting: &five})
	require.NoError(t, err)
	b.waitEmpty(t)
	b.requireJobs(t, ids)
	st, err := b.client.Stats(ctx, b.queue)
	require.NoError(t, err)
	require.GreaterOrEqual(t, st.RejectedFull, int64(3), "refused at each try before the bound rose")
}

// TestEnqueueWithKeysSealsTheRow: WithKeys writes the payload sealed into the row, bound to
// its id; the relay, with no keyring, sends it as it is; a reader with the key opens it.
func TestEnqueueWithKeysSealsTheRow(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	k, err := keyring.Parse("k1 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, keyring.KeySize)))
	require.NoError(t, err)
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	id, err := outbox.Enqueue(ctx, tx, b.queue, pipeline.Task{Type: "email", Payload: []byte(`{"card":"4111"}`)}, outbox.WithKeys(k))
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	var row []byte
	require.NoError(t, b.db.QueryRow(`SELECT payload FROM `+outbox.Table+` WHERE id = $1`, id).Scan(&row))
	require.True(t, keyring.Sealed(row), "the row holds %q", row)
	require.NotContains(t, string(row), "4111")

	b.relay(t, outbox.RelayConfig{})
	b.waitEmpty(t)
	j, err := b.client.Get(ctx, b.queue, id)
	require.NoError(t, err)
	require.Equal(t, row, j.Payload, "the relay sends the sealed payload unchanged")
	require.NoError(t, j.Open(k))
	require.Equal(t, `{"card":"4111"}`, string(j.Payload))
}
