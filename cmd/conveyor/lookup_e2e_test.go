package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// status and cancel without --queue look in every known queue, name the queue they found the
// job in, and, when no queue has it, say which queues they searched. Before, they looked only
// in "default" and said "not found". A prefix of its own keeps the known queues this test's.
func testCrossQueueLookup(t *testing.T, c *cli) {
	prefix := redistest.UniqueName(t)
	in := func(args ...string) []string { return append(args, "--prefix", prefix) }
	c.ok(t, in("publish", "--queue", "alpha", "--type", "echo")...)
	id := c.publishOne(t, in("--queue", "beta", "--type", "echo", "--delay", "1h")...)

	var j jobView
	require.NoError(t, json.Unmarshal([]byte(c.ok(t, in("status", id, "--json")...)), &j))
	require.Equal(t, "beta", j.Queue)
	require.Equal(t, "scheduled", j.Status)
	require.Contains(t, c.ok(t, in("status", id)...), "beta")

	require.Equal(t, "canceled "+id+" in queue beta\n", c.ok(t, in("cancel", id)...))
	other := c.publishOne(t, in("--queue", "alpha", "--type", "echo", "--delay", "1h")...)
	require.Equal(t, `{"id":"`+other+`","queue":"alpha","canceled":true}`+"\n", c.ok(t, in("cancel", other, "--json")...))

	c.refused(t, 1, "not found in any known queue (searched alpha, beta)", in("status", "no-such-job")...)
	c.refused(t, 1, "not found in any known queue (searched alpha, beta)", in("cancel", "no-such-job")...)
	c.refused(t, 1, `job `+id+` not found in queue "alpha"`, in("status", "--queue", "alpha", id)...)
}

// publish --id of an existing job: the same job is not published again (a note on stderr,
// exit 0, "created":false with --json); another type or payload is refused (exit 1, saying
// what differs, nothing written). The same with --unique. Before, every re-publish printed
// the id and exited 0 silently.
func testPublishDuplicates(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	pub := func(args ...string) []string {
		return append([]string{"publish", "--queue", q, "--type", "echo", "--payload", `{"n":1}`}, args...)
	}
	require.Equal(t, `{"id":"order-42","created":true}`+"\n", c.ok(t, pub("--id", "order-42", "--json")...))
	r := c.run(t, pub("--id", "order-42")...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "order-42\n", r.stdout)
	require.Contains(t, r.stderr, "job order-42 not published again: it exists already, with the same type and payload")
	require.Equal(t, `{"id":"order-42","created":false}`+"\n", c.ok(t, pub("--id", "order-42", "--json")...))

	c.refused(t, 1, "job order-42 exists with a different payload", "publish", "--queue", q, "--type", "echo",
		"--payload", `{"n":2}`, "--id", "order-42")
	c.refused(t, 1, "job order-42 exists with a different type and payload", "publish", "--queue", q,
		"--type", "sleep", "--payload", `{"ms":1}`, "--id", "order-42")
	require.Equal(t, `{"n":1}`, string(c.status(t, "--queue", q, "order-42").Payload), "nothing was written")

	held := c.publishOne(t, "--queue", q, "--type", "echo", "--unique", "u1", "--delay", "1h")
	r = c.run(t, "publish", "--queue", q, "--type", "echo", "--payload", `{"other":true}`, "--unique", "u1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, held+"\n", r.stdout)
	require.Contains(t, r.stderr, `it holds the unique key "u1"`)
	require.EqualValues(t, 2, c.stats(t, "--queue", q).Enqueued)
}

// demo --produce-only publishes the demo mix to a queue of the configured Redis: echo, sleep,
// delayed, flaky in turn and every 20th a poison job with no retries; its flags go only with
// it, and it needs a Redis of the user's (workers elsewhere must see the jobs).
func testProduceOnly(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	ids := strings.Fields(c.ok(t, "demo", "--produce-only", "--queue", q, "--every", "5ms", "--count", "25"))
	require.Len(t, ids, 25)
	types := map[string]int{}
	for i, id := range ids {
		j := c.status(t, "--queue", q, id)
		types[j.Type]++
		if i+1 == 20 {
			require.Equal(t, "fail", j.Type, "the 20th is the poison job")
			require.Zero(t, j.MaxRetries)
		}
		if i%4 == 2 {
			require.Equal(t, "scheduled", j.Status, "the third of each four is delayed")
		}
	}
	require.Equal(t, map[string]int{"echo": 13, "sleep": 6, "flaky": 5, "fail": 1}, types)
	require.EqualValues(t, 25, c.stats(t, "--queue", q).Enqueued)

	c.refused(t, 2, "--every must be positive", "demo", "--produce-only", "--every", "0s")
	c.refused(t, 2, "go with --produce-only", "demo", "--queue", q)
	r := c.exec(t, "", env(""), "demo", "--produce-only", "--count", "1")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "give --redis or set CONVEYOR_REDIS_URL")

	// Without --count its normal end is a signal (docker compose stop): exit 0, as a worker.
	p := c.start(t, "demo", "--produce-only", "--queue", q, "--every", "5ms")
	waitFor(t, 30*time.Second, 20*time.Millisecond, "a published id", func() bool { return strings.Count(p.output.String(), "\n") > 2 })
	require.Equal(t, 0, p.stop(t), p.output.String())
}
