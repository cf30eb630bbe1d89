package outbox_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/outbox"
	"github.com/conveyorq/conveyor/pipeline"
)

// measureHeldBack runs TestMeasureHeldBack, the figure of docs/RELIABILITY.md ("The outbox
// relay behind rows it cannot send"):
//
//	go test -count=1 -run TestMeasureHeldBack -v ./outbox/ -args -outbox.measure-held-back
var measureHeldBack = flag.Bool("outbox.measure-held-back", false,
	"measure how long 10 rows of a known queue wait behind 600 rows of queues over the 2,000-queue cap")

// TestMeasureHeldBack: the known queues at their maximum (InspectorConfig.MaxQueues's default, 2,000),
// 600 rows for new queues the cap refuses, then 10 rows of a known queue. It measures, from
// the relay's start, when the 10 jobs were all in Redis; then, with the relay running and the
// 600 held back and tried again, rounds of 10 more rows from their commit to their jobs. The checks bound nothing by
// time: they only say the rows went (the figures are logged).
func TestMeasureHeldBack(t *testing.T) {
	if !*measureHeldBack {
		t.Skip("a measurement: -args -outbox.measure-held-back")
	}
	const bad, good = 600, 10
	b := setup(t)
	ctx := context.Background()
	insp, err := pipeline.NewInspector(b.rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	_, err = insp.CreateQueue(ctx, b.queue, pipeline.QueueOptions{})
	require.NoError(t, err)
	for i := 1; i < 2000; i++ {
		_, err = insp.CreateQueue(ctx, fmt.Sprintf("known-%d", i), pipeline.QueueOptions{})
		require.NoError(t, err)
	}
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	for i := range bad {
		_, err := outbox.Enqueue(ctx, tx, fmt.Sprintf("over-%d", i), pipeline.Task{Type: "email"})
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit())
	ids := b.enqueue(t, good, nil)
	sent := func(ids []string) bool {
		for _, id := range ids {
			if _, err := b.client.Get(ctx, b.queue, id); err != nil {
				return false
			}
		}
		return true
	}
	start := time.Now()
	r := b.relay(t, outbox.RelayConfig{})
	require.Eventually(t, func() bool { return sent(ids) }, time.Minute, time.Millisecond)
	first := time.Since(start)
	require.Eventually(t, func() bool { return r.Stats().HeldBack >= bad }, time.Minute, time.Millisecond)
	// Then rounds of 10 more while the relay keeps trying the 600 (their backoffs end at
	// various times of a round).
	var steady []time.Duration
	for range 10 {
		commit := time.Now()
		more := b.enqueue(t, good, nil)
		require.Eventually(t, func() bool { return sent(more) }, time.Minute, time.Millisecond)
		steady = append(steady, time.Since(commit).Round(100*time.Microsecond))
	}
	slices.Sort(steady)
	t.Logf("%d rows of a known queue behind %d rows of queues over the cap: all queued %s after the relay's start; "+
		"then 10 rounds of %d more, committed while the %d were held back and tried again: queued %v after their commit (sorted); "+
		"stats %+v", good, bad, first.Round(time.Millisecond), good, bad, steady, r.Stats())
}
