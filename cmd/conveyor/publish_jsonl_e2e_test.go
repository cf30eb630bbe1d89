package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestPublishJSONLE2E runs 'publish --jsonl' with the binary on a file and on standard input:
// the good lines become jobs with the fields they carry, the bad ones are named by number,
// and the exit code says whether any failed.
func TestPublishJSONLE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	srv := redistest.Start(t)
	c := &cli{bin: buildCLI(t), url: srv.URL(), rdb: srv.Client(t)}
	file := filepath.Join(t.TempDir(), "jobs.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join([]string{
		`{"type":"echo","id":"a","payload":{"to":"ada"},"max_retries":2,"metadata":{"tenant":"t1"}}`,
		`{"type":"echo","id":"b","delay":"1h","priority":2}`,
		`{"type":"echo","delay":"soon"}`,
		`{"type":"echo","id":"c","payload":{"to":"bob"}}`,
	}, "\n")), 0o600))

	r := c.run(t, "publish", "-q", "jl", "--jsonl", file, "--json")
	require.Equal(t, 1, r.code, r.stderr)
	var got []map[string]any
	for line := range strings.Lines(r.stdout) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		got = append(got, m)
	}
	require.Len(t, got, 4, r.stdout)
	require.Equal(t, map[string]any{"line": 1.0, "id": "a", "created": true}, got[0])
	require.Equal(t, map[string]any{"line": 2.0, "id": "b", "created": true}, got[1])
	require.EqualValues(t, 3, got[2]["line"])
	require.Contains(t, got[2]["error"], "delay")
	require.Equal(t, map[string]any{"line": 4.0, "id": "c", "created": true}, got[3])
	require.Contains(t, r.stderr, "published 3 jobs from 4 lines of "+file+"\n")
	require.Contains(t, r.stderr, "conveyor: 1 of 4 lines failed")

	a := c.status(t, "-q", "jl", "a")
	require.Equal(t, "queued", a.Status)
	b := c.status(t, "-q", "jl", "b")
	require.Equal(t, "scheduled", b.Status)

	// Standard input, all good: exit 0, the ids on stdout (the jobs are there: not created).
	r = c.exec(t, `{"type":"echo","id":"a","payload":{"to":"ada"},"max_retries":2,"metadata":{"tenant":"t1"}}`+"\n"+`{"type":"echo","id":"d"}`+"\n",
		env(c.url), "publish", "--redis", c.url, "-q", "jl", "--jsonl", "-")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "a\nd\n", r.stdout)
	// No worker reads jl: the warning comes before the summary (publish_warnings_e2e_test.go).
	require.Equal(t, `warning: no worker has read queue "jl" in the last 10m0s (no worker has sent a heartbeat in that time)`+"\n"+
		"published 2 jobs from 2 lines of standard input\n", r.stderr)
}
