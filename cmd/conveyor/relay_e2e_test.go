package main

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/faultproxy"
	"github.com/conveyorq/conveyor/internal/pgtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/outbox"
	"github.com/conveyorq/conveyor/pipeline"
)

// TestRelayE2E: `conveyor relay` SIGKILLed in the middle of a batch (its jobs written to Redis,
// its rows not yet deleted), then started again: every committed row is exactly one job; then
// SIGTERM stops it with exit 0.
func TestRelayE2E(t *testing.T) {
	ctx := context.Background()
	bin := buildCLI(t)
	pgURL := pgtest.Start(t).NewDatabase(t)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	db, err := sql.Open("pgx", pgURL)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, outbox.Migrate(ctx, db))

	const queue, n = "orders", 300
	var ids []string
	for range n / 30 {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		for range 30 {
			id, err := outbox.Enqueue(ctx, tx, queue, pipeline.Task{Type: "email", Payload: []byte(`{}`)})
			require.NoError(t, err)
			ids = append(ids, id)
		}
		require.NoError(t, tx.Commit())
	}
	rows := func() int {
		var k int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM `+outbox.Table).Scan(&k))
		return k
	}
	enqueued := func() int64 {
		st, err := client.Stats(ctx, queue)
		require.NoError(t, err)
		return st.Enqueued
	}

	// The first relay talks to Redis through a proxy that, once it has relayed a batch,
	// holds every reply for a while: a batch's jobs are then in Redis while its rows are
	// still locked, not deleted, and the relay is killed in that window.
	proxy := faultproxy.Start(t, srv.Addr)
	url := "redis://" + proxy.Addr() + "/0"
	c := &cli{bin: bin, url: url, rdb: rdb}
	first := c.start(t, "relay", "--postgres", pgURL, "--batch", "10")
	require.Eventually(t, func() bool { return enqueued() > 0 }, time.Minute, 5*time.Millisecond)
	proxy.DelayReplies(2 * time.Second)
	before := enqueued()
	require.Eventually(t, func() bool { return enqueued() > before }, time.Minute, time.Millisecond)
	require.NoError(t, first.cmd.Process.Kill()) // SIGKILL, by pid
	<-first.done
	sent, left := enqueued(), rows()
	require.Greater(t, int(sent)+left, n, "the kill did not land mid-batch: %d jobs, %d rows left", sent, left)

	c = &cli{bin: bin, url: srv.URL(), rdb: rdb}
	second := c.start(t, "relay", "--postgres", pgURL, "--batch", "10", "--metrics-addr", "127.0.0.1:0")
	require.Eventually(t, func() bool { return rows() == 0 }, time.Minute, 10*time.Millisecond)
	require.EqualValues(t, n, enqueued(), "jobs created")
	// The second relay's series: what it relayed (some rows as duplicates of the killed
	// relay's sends), and nothing waiting.
	body := scrape(t, logged(t, second, metricsAddrLog, "the relay's metrics address"), "")
	relayed, err := strconv.Atoi(seriesValue(body, `conveyor_relay_rows_total{result="relayed"}`))
	require.NoError(t, err, "%s", body)
	require.Equal(t, left, relayed, "the rows the first relay left")
	require.Equal(t, "0", seriesValue(body, "conveyor_relay_pending"))
	require.NotEmpty(t, seriesValue(body, "conveyor_relay_lag_seconds_count"))
	// Every reason's series from the start, at 0 here.
	require.Equal(t, "0", seriesValue(body, `conveyor_relay_held_back_total{reason="too_many_queues"}`))
	require.Equal(t, "0", seriesValue(body, `conveyor_relay_set_aside_total{reason="conflict"}`))
	for _, id := range ids {
		_, err := client.Get(ctx, queue, id)
		require.NoError(t, err, "job %s", id)
	}
	require.Equal(t, 0, second.stop(t), "exit code after SIGTERM")
	require.Contains(t, second.output.String(), "relay stopped")
	t.Logf("killed with %d jobs sent and %d rows left; the second relay sent the rest", sent, left)
}
