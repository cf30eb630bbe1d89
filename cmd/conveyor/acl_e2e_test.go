package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// aclRule is the least-privilege user docs/OPERATIONS.md recommends (after "ACL SETUSER <name>"):
// Conveyor's keys and channels only, and no dangerous commands. This test runs a worker and
// the CLI as that user, so the documented line stays true.
const aclRule = "on >s3cret resetkeys ~conveyor:* resetchannels &conveyor:* -@all " +
	"+@connection +@read +@write +@stream +@scripting +@pubsub +@keyspace -@dangerous +time"

func TestACLUser(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	srv := redistest.Start(t)
	admin := srv.Client(t)
	require.NoError(t, admin.Do(context.Background(), append([]any{"ACL", "SETUSER", "conveyor"},
		toAny(strings.Fields(aclRule))...)...).Err())
	url := fmt.Sprintf("redis://conveyor:s3cret@%s/0", srv.Addr)
	c := &cli{bin: buildCLI(t), url: url, rdb: admin}

	w := c.start(t, "worker", "--queue", "acl", "--backoff-base", "50ms", "--visibility-timeout", "1s", "--recovery-interval", "200ms")
	ok := c.publishOne(t, "--queue", "acl", "--type", "echo", "--payload", `{"x":1}`)
	failing := c.publishOne(t, "--queue", "acl", "--type", "fail", "--max-retries", "1")
	delayed := c.publishOne(t, "--queue", "acl", "--type", "echo", "--delay", "200ms")
	waitFor(t, 20*time.Second, 50*time.Millisecond, "jobs finished as the ACL user", func() bool {
		return c.status(t, "--queue", "acl", ok).Status == "completed" &&
			c.status(t, "--queue", "acl", failing).Status == "failed" &&
			c.status(t, "--queue", "acl", delayed).Status == "completed"
	})
	var dead struct{ Jobs []json.RawMessage }
	require.NoError(t, json.Unmarshal([]byte(c.ok(t, "dead", "list", "--queue", "acl", "--json")), &dead))
	require.Len(t, dead.Jobs, 1)
	c.ok(t, "dead", "replay", "--queue", "acl", failing)
	c.ok(t, "stats", "--all", "--json")
	require.Contains(t, c.ok(t, "workers", "--json"), `"queues":["acl"]`, "the worker's heartbeat, written and read as the ACL user")
	later := c.publishOne(t, "--queue", "acl", "--type", "echo", "--delay", "1h")
	c.ok(t, "cancel", "--queue", "acl", later)
	c.ok(t, "bench", "--jobs", "200", "--json")
	require.Equal(t, 0, w.stop(t), "the worker shut down cleanly: %s", w.output)
	require.NotContains(t, w.output.String(), "NOPERM", "a command or key outside the ACL was used")

	// And the library's Client directly, as an application would use it.
	rdb := dialOrFail(t, url)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	_, err = client.EnqueueBatch(context.Background(), "acl",
		[]pipeline.Task{{Type: "echo"}, {Type: "echo", Opts: []pipeline.Option{pipeline.WithUnique("u", time.Minute)}}})
	require.NoError(t, err)
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func dialOrFail(t *testing.T, url string) redis.UniversalClient {
	t.Helper()
	opt, err := redis.ParseURL(url)
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}
