package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// Issue 33: a publish to a queue no live worker has read, or of a type none has handled, is
// made as ever (its id on stdout, exit 0) and warned about on stderr; a right one, or one with
// --no-warn, prints nothing there.
func TestPublishWarningsE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	srv := redistest.Shared(t)
	c := &cli{bin: buildCLI(t), url: srv.URL(), rdb: srv.Client(t)}
	prefix := redistest.UniqueName(t)
	at := func(args ...string) []string { return append(args, "--prefix", prefix) }

	c.start(t, at("worker", "--queue", "emails")...)
	waitFor(t, 30*time.Second, 20*time.Millisecond, "the worker's first heartbeat", func() bool {
		var v struct {
			Workers []any `json:"workers"`
		}
		return json.Unmarshal([]byte(c.ok(t, at("workers", "--json")...)), &v) == nil && len(v.Workers) == 1
	})

	queueTypo := `warning: no worker has read queue "emials" in the last 10m0s (known queues read: emails)` + "\n"
	typeTypo := `warning: no worker has handled type "ecoh" on any queue in the last 10m0s (did you mean "echo"?)` + "\n"
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"QueueTypo", []string{"--queue", "emials", "--type", "echo"}, queueTypo},
		{"TypeTypo", []string{"--queue", "emails", "--type", "ecoh"}, typeTypo},
		{"Right", []string{"--queue", "emails", "--type", "echo"}, ""},
		{"Count", []string{"--queue", "emials", "--type", "echo", "--count", "3"}, queueTypo},
		{"JSON", []string{"--queue", "emails", "--type", "ecoh", "--json"}, typeTypo},
		{"NoWarn", []string{"--queue", "emials", "--type", "ecoh", "--no-warn"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.run(t, at(append([]string{"publish"}, tc.args...)...)...)
			require.Equal(t, 0, r.code, r.stderr)
			require.NotEmpty(t, strings.TrimSpace(r.stdout), "the ids are printed as ever")
			require.Equal(t, tc.stderr, r.stderr)
		})
	}

	// --jsonl warns once for its jobs, before its summary.
	r := c.exec(t, `{"type":"ecoh"}`+"\n"+`{"type":"echo"}`+"\n"+`{"type":"ecoh"}`+"\n", env(c.url),
		at("publish", "--redis", c.url, "-q", "emails", "--jsonl", "-")...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Len(t, strings.Fields(r.stdout), 3)
	require.Equal(t, typeTypo+"published 3 jobs from 3 lines of standard input\n", r.stderr)
}
