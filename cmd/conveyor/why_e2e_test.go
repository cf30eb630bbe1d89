package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/status"
)

// waitingFor is `status --json`'s waiting_for.
type waitingFor struct {
	Kind     status.Reason `json:"kind"`
	Detail   string        `json:"detail"`
	Scope    string        `json:"scope"`
	Held     int           `json:"held"`
	Slots    int           `json:"slots"`
	Position int           `json:"position"`
}

// Issue 33's cases in the CLI, with worker processes of the built binary: why a job is not
// running, in `status` (a waiting_for line; --json's waiting_for), `list` (WHY; --json's rows)
// and `stats --json` (the counts by reason).
func TestWaitingForE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	srv := redistest.Shared(t)
	c := &cli{bin: buildCLI(t), url: srv.URL(), rdb: srv.Client(t)}
	p := redistest.UniqueName(t)
	at := func(args ...string) []string { return append(args, "--prefix", p) }
	reason := func(q, id string) *waitingFor {
		t.Helper()
		out := c.ok(t, at("status", "--queue", q, "--json", id)...)
		var j struct {
			Status     string      `json:"status"`
			WaitingFor *waitingFor `json:"waiting_for"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &j), out)
		return j.WaitingFor
	}

	// A queue no live worker reads: "emials" for "emails".
	c.start(t, at("worker", "--queue", "emails", "--heartbeat-interval", "300ms")...)
	emials := c.publishOne(t, at("--queue", "emials", "--type", "echo", "--payload", `{}`)...)
	// The worker's first beat is written as it starts: wait for it, or "emails" reads as unread
	// too (which says nothing of emials).
	waitFor(t, 30*time.Second, 20*time.Millisecond, "the worker's heartbeat", func() bool {
		return strings.Contains(c.ok(t, at("workers")...), "emails")
	})
	w := reason("emials", emials)
	require.NotNil(t, w)
	require.Equal(t, status.NoReader, w.Kind)
	text := c.ok(t, at("status", "--queue", "emials", emials)...)
	require.Contains(t, text, "waiting_for:")
	require.Contains(t, text, "no live worker reads queue emials (no_worker_queue)")
	list := c.ok(t, at("list", "--queue", "emials", "--status", "queued")...)
	require.Contains(t, list, "WHY")
	require.Contains(t, list, "no live worker reads queue emials")
	var page struct {
		Jobs []struct {
			ID         string      `json:"id"`
			WaitingFor *waitingFor `json:"waiting_for"`
		} `json:"jobs"`
	}
	out := c.ok(t, at("list", "--queue", "emials", "--status", "queued", "--json")...)
	require.NoError(t, json.Unmarshal([]byte(out), &page), out)
	require.Len(t, page.Jobs, 1)
	require.Equal(t, w, page.Jobs[0].WaitingFor)
	require.Equal(t, map[status.Reason]int64{status.NoReader: 1}, c.stats(t, at("--queue", "emials")...).WaitingFor)

	// A type no live worker handles: "ecoh", on the queue the worker reads. It takes the job
	// and fails its attempt; the retry waits with the reason.
	ecoh := c.publishOne(t, at("--queue", "emails", "--type", "ecoh")...)
	waitFor(t, 30*time.Second, 20*time.Millisecond, "ecoh's reason", func() bool {
		w := reason("emails", ecoh)
		return w != nil && w.Kind == status.NoHandler
	})
	require.Contains(t, c.ok(t, at("status", "--queue", "emails", ecoh)...), "handles type ecoh")
	// Its retry would join the paused queue's stream below once due (a loaded machine gets
	// there): cancel it, so the paused count is the one job published while paused.
	c.ok(t, at("cancel", "--queue", "emails", ecoh)...)

	// A paused queue.
	c.ok(t, at("pause", "emails")...)
	paused := c.publishOne(t, at("--queue", "emails", "--type", "echo", "--payload", `{}`)...)
	require.Equal(t, status.Paused, reason("emails", paused).Kind)
	require.Contains(t, c.ok(t, at("list", "--queue", "emails", "--status", "queued")...), "queue emails is paused")
	require.Equal(t, int64(1), c.stats(t, at("--queue", "emails")...).WaitingFor[status.Paused])
	c.ok(t, at("resume", "emails")...)

	// A concurrency limit of 1 and three 1.5 s sleep jobs, as the issue found it: two wait
	// for the slot the third holds.
	q := "prio"
	var ids []string
	for range 3 {
		ids = append(ids, c.publishOne(t, at("--queue", q, "--type", "sleep", "--payload", `{"ms":1500}`)...))
	}
	c.ok(t, at("limits", "set", q, "--concurrency", "1")...)
	c.start(t, at("worker", "--queue", q, "--concurrency", "3")...)
	var limited []*waitingFor
	var limitedIDs []string
	waitFor(t, 30*time.Second, 20*time.Millisecond, "two jobs waiting for the slot", func() bool {
		limited, limitedIDs = limited[:0], limitedIDs[:0]
		for _, id := range ids {
			if w := reason(q, id); w != nil && w.Kind == status.ConcurrencyLimit {
				limited, limitedIDs = append(limited, w), append(limitedIDs, id)
			}
		}
		return len(limited) == 2
	})
	for _, w := range limited {
		require.Equal(t, waitingFor{Kind: status.ConcurrencyLimit, Scope: "queue", Held: 1, Slots: 1,
			Detail: "concurrency limit of queue: 1 of 1 slots held"}, *w)
	}
	// Read again: a slot may have moved on meanwhile, but a job still waiting says so.
	if w := reason(q, limitedIDs[0]); w != nil && w.Kind == status.ConcurrencyLimit {
		require.Contains(t, c.ok(t, at("status", "--queue", q, limitedIDs[0])...),
			"concurrency limit of queue: 1 of 1 slots held (concurrency_limit)")
	}
}
