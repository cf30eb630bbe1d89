package cli

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// TestStatusProgress: status shows a running job's progress as rows and JSON fields (absent
// before any report, the other rows and fields unchanged), and status --follow prints a line
// per change until the job ends (here: canceled), then exits 0.
func TestStatusProgress(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t) // a queue of its own is isolation enough
	rdb := srv.Client(t)
	pq := redistest.UniqueName(t)
	ctx := t.Context()
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	j, err := c.Enqueue(ctx, pq, pipeline.Task{Type: "echo"})
	require.NoError(t, err)

	out, stderr, code := runInProcess(t, "", "--redis", srv.URL(), "status", "--queue", pq, j.ID, "--json")
	require.Zero(t, code, stderr)
	require.NotContains(t, out, `"progress`)
	before := map[string]any{}
	require.NoError(t, json.Unmarshal([]byte(out), &before))

	// The handler's report, as a worker writes it (the job's entry is the fence).
	q := keys.New(keys.DefaultPrefix, pq)
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, q.Stream(), keys.Group, "0").Err())
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "w1",
		Streams: []string{q.Stream(), ">"}, Count: 1, Block: -1}).Result()
	require.NoError(t, err)
	entry := res[0].Messages[0].ID
	row, err := jobstate.NewStore(rdb, "").WriteProgress(ctx, q, jobstate.ProgressParams{ID: j.ID, Entry: entry, Attempt: 1,
		Percent: 40, Message: "copying files", Events: events.ModeOf(ctx, rdb)})
	require.NoError(t, err)
	require.Zero(t, row.Code)

	out, stderr, code = runInProcess(t, "", "--redis", srv.URL(), "status", "--queue", pq, j.ID)
	require.Zero(t, code, stderr)
	require.Regexp(t, `(?m)^progress:\s+40%$`, out)
	require.Regexp(t, `(?m)^progress_message:\s+copying files$`, out)
	require.Regexp(t, `(?m)^progress_at:\s+\S+`, out)
	require.Regexp(t, `(?m)^status:\s+queued$`, out)

	out, stderr, code = runInProcess(t, "", "--redis", srv.URL(), "status", "--queue", pq, j.ID, "--json")
	require.Zero(t, code, stderr)
	after := map[string]any{}
	require.NoError(t, json.Unmarshal([]byte(out), &after))
	require.EqualValues(t, 40, after["progress"])
	require.Equal(t, "copying files", after["progress_message"])
	require.NotZero(t, after["progress_at"])
	for k, v := range before {
		require.Equal(t, v, after[k], "field %s unchanged", k)
	}

	type result struct {
		out, stderr string
		code        int
	}
	done := make(chan result, 1)
	// The follow prints the job's status block, then a line per change: "15:04:05.000 queued ...".
	out1 := newLineWriter(regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d\.\d{3} queued .*\n`))
	go func() {
		var errOut bytes.Buffer
		code := Run(t.Context(), []string{"--redis", srv.URL(), "status", "--follow", j.ID}, strings.NewReader(""),
			out1, &errOut, func(string) string { return "" })
		done <- result{out1.String(), errOut.String(), code}
	}()
	// Cancel once the follow has printed its queued line. Its reason is read after the job
	// (Inspector.Explain) and given only while the job is unchanged: a cancel before that read
	// left the line without it (a loaded fresh CI).
	select {
	case <-out1.seen:
	case r := <-done:
		t.Fatalf("status --follow ended before its queued line: %d %s %s", r.code, r.out, r.stderr)
	case <-time.After(30 * time.Second):
		t.Fatal("status --follow printed no queued line")
	}
	// And once it is subscribed: a marked job's end is announced, so wait for the watched mark
	// its read makes.
	require.Eventually(t, func() bool {
		return rdb.HExists(ctx, q.Job(j.ID), keys.FieldWatched).Val()
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, c.Cancel(ctx, pq, j.ID))
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("status --follow did not end with the job")
	}
	require.Zero(t, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	// A queued job's line says why it waits (no worker runs here).
	require.Regexp(t, `queued attempt 0 progress 40% copying files waiting for: no live worker reads queue \S+$`, lines[len(lines)-2])
	// Canceled before a start mark: no attempt counted, so no report of one is shown.
	require.Regexp(t, `canceled attempt 0$`, lines[len(lines)-1])
}

// lineWriter is a writer safe for one writer and readers, whose seen is closed once what was
// written matches want.
type lineWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want *regexp.Regexp
	seen chan struct{}
	once sync.Once
}

func newLineWriter(want *regexp.Regexp) *lineWriter {
	return &lineWriter{want: want, seen: make(chan struct{})}
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if w.want.Match(w.buf.Bytes()) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
