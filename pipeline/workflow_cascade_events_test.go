package pipeline_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/jobstate"
)

// The tasks a cascade's later calls (FollowCascade, wf_cascade.lua) cancel are each announced
// with a canceled event, as those the cancel's own call cancels are: a watcher of a task
// (Client.Wait, an SSE stream) learns of its end without reading (mutant WC2 of
// wf_cascade.lua dropped the announcement). The cancel's own call announces nothing here (no
// events mode passed), and cancels at most a step of the 1,000 tasks: the events heard are the
// later calls'. The bound on hearing them is for a machine far slower than any seen.
func TestWorkflowCascadeStepsAnnounceTheirCancels(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const width = 1000
	_, err := b.client.Workflow(ctx, b.queue, wideWorkflow("wide", width))
	require.NoError(t, err)
	ps := b.rdb.Subscribe(ctx, b.q.Events())
	t.Cleanup(func() { _ = ps.Close() })
	_, err = ps.Receive(ctx) // subscribed
	require.NoError(t, err)
	heard := ps.Channel()

	now := time.Now()
	_, err = jobstate.NewStore(b.rdb, "").Cancel(ctx, b.q, jobstate.CancelParams{ID: "wide.root", Now: now, Retention: time.Hour, MinRetention: time.Minute})
	require.NoError(t, err)
	canceled := 0
	for {
		r, err := jobstate.NewStore(b.rdb, "").FollowCascade(ctx, b.q, jobstate.CascadeParams{Now: now, Events: events.Plain})
		require.NoError(t, err)
		canceled += r.Canceled
		if r.Left == 0 {
			break
		}
	}
	require.GreaterOrEqual(t, canceled, width-jobstate.CascadeStep)
	ids := map[string]bool{}
	timeout := time.After(time.Minute)
	for len(ids) < canceled {
		select {
		case m := <-heard:
			evs, err := events.Parse(m.Payload)
			require.NoError(t, err)
			for _, e := range evs {
				if e.Status == "canceled" {
					ids[e.ID] = true
				}
			}
		case <-timeout:
			t.Fatalf("%d of the %d tasks the cascade's later calls canceled announced", len(ids), canceled)
		}
	}
	require.Len(t, ids, canceled)
}
