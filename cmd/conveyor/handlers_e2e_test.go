package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// conveyor handlers through the binary, run from TestE2E.

func testHandlersCmd(t *testing.T, c *cli) {
	out := c.ok(t, "handlers")
	lines := strings.Split(out, "\n")
	require.Regexp(t, `^TYPE +DOES +PAYLOAD +RESULT$`, lines[0])
	for _, typ := range []string{"echo", "fail", "flaky", "http", "noop", "sleep"} {
		require.Regexp(t, `(?m)^`+typ+` +\S`, out)
		require.Regexp(t, `(?m)^  conveyor publish --type `+typ+` --payload '\{.*\}'$`, out)
	}
	require.Contains(t, out, `conveyor publish --type sleep --payload '{"ms":1500}'`)

	var hs []struct {
		Type, Summary, Payload, Result string
		Example                        json.RawMessage
	}
	require.NoError(t, json.Unmarshal([]byte(c.ok(t, "handlers", "--json")), &hs))
	require.Len(t, hs, 6)
	require.Equal(t, "echo", hs[0].Type)
	require.JSONEq(t, `{"hello":"world"}`, string(hs[0].Example))

	// Every example is a payload the worker's handler takes: publish each, and the ones that
	// succeed do (http would reach the network; fail always fails).
	q := redistest.UniqueName(t)
	w := c.start(t, "worker", "--queue", q, "--backoff-base", "100ms", "--backoff-max", "1s")
	ids := map[string]string{}
	for _, h := range hs {
		if h.Type == "http" || h.Type == "fail" {
			continue
		}
		ids[h.Type] = c.publishOne(t, "--queue", q, "--type", h.Type, "--payload", string(h.Example), "--max-retries", "3")
	}
	for typ, id := range ids {
		waitFor(t, 60*time.Second, 50*time.Millisecond, typ+" to complete", func() bool {
			j := c.status(t, "--queue", q, id)
			require.NotEqual(t, "failed", j.Status, "%s: %s", typ, j.LastError)
			return j.Status == "completed"
		})
	}
	require.Equal(t, 0, w.stop(t))
	c.refused(t, 2, `unexpected argument "echo"`, "handlers", "echo")
}
