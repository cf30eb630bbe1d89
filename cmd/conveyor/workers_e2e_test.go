package main

import (
	"encoding/json"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// Issue 20: `conveyor workers` lists a worker process from its heartbeat record, with the job
// it runs; `queues delete` of a queue it reads warns, naming it; a SIGKILLed worker, which
// cannot remove its record, drops out once the record's TTL (three beats) has passed.
func TestWorkersE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	srv := redistest.Shared(t)
	c := &cli{bin: buildCLI(t), url: srv.URL(), rdb: srv.Client(t)}
	prefix, q := redistest.UniqueName(t), "work"
	at := func(args ...string) []string { return append(args, "--prefix", prefix) }

	type view struct {
		Workers []struct {
			Name    string   `json:"name"`
			PID     int      `json:"pid"`
			Queues  []string `json:"queues"`
			Running []struct {
				ID    string `json:"id"`
				Queue string `json:"queue"`
				Type  string `json:"type"`
			} `json:"running"`
		} `json:"workers"`
	}
	list := func() view {
		var v view
		out := c.ok(t, at("workers", "--json")...)
		require.NoError(t, json.Unmarshal([]byte(out), &v), out)
		return v
	}
	r := c.run(t, at("workers")...)
	require.Equal(t, 0, r.code)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "no live workers")
	require.JSONEq(t, `{"workers":[]}`, c.ok(t, at("workers", "--json")...))

	w := c.start(t, at("worker", "--queue", q, "--queue", "spare", "--name", "e2e-worker", "--heartbeat-interval", "300ms")...)
	id := c.publishOne(t, at("--queue", q, "--type", "sleep", "--payload", `{"ms":600000}`)...)
	var v view
	waitFor(t, 30*time.Second, 20*time.Millisecond, "the worker listed with its running job", func() bool {
		v = list()
		return len(v.Workers) == 1 && len(v.Workers[0].Running) == 1
	})
	got := v.Workers[0]
	require.Equal(t, "e2e-worker", got.Name)
	require.Equal(t, w.cmd.Process.Pid, got.PID)
	require.Equal(t, []string{"spare", q}, got.Queues)
	require.Equal(t, id, got.Running[0].ID)
	require.Equal(t, q, got.Running[0].Queue)
	require.Equal(t, "sleep", got.Running[0].Type)
	table := c.ok(t, at("workers")...)
	require.Contains(t, table, "NAME")
	require.Contains(t, table, "e2e-worker")
	require.Contains(t, table, "1/10")
	require.Contains(t, table, id)

	// The worker reads "spare": deleting it works and warns on stderr, naming the worker.
	c.publishOne(t, at("--queue", "spare", "--type", "echo", "--delay", "1h")...)
	r = c.run(t, at("queues", "delete", "spare", "--force")...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "deleted queue spare\n", r.stdout)
	require.Contains(t, r.stderr, "warning: 1 live worker(s) still read queue spare: e2e-worker")
	// A queue nobody reads: no warning.
	c.publishOne(t, at("--queue", "unread", "--type", "echo", "--delay", "1h")...)
	r = c.run(t, at("queues", "delete", "unread", "--force")...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Empty(t, r.stderr)

	require.NoError(t, w.cmd.Process.Signal(syscall.SIGKILL))
	<-w.done
	waitFor(t, 30*time.Second, 50*time.Millisecond, "the killed worker dropped out", func() bool {
		return len(list().Workers) == 0
	})
}
