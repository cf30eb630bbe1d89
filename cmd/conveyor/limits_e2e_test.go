package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// limits set, list --json and delete through the binary, run from TestE2E, under a key
// prefix of its own.

// limitView is the `limits list --json` contract.
type limitView struct {
	Queue       string `json:"queue"`
	Type        string `json:"type"`
	PerKey      bool   `json:"per_key"`
	Rate        int    `json:"rate"`
	IntervalMS  int64  `json:"interval_ms"`
	Concurrency int    `json:"concurrency"`
}

func (c *cli) limits(t *testing.T, args ...string) []limitView {
	t.Helper()
	out := c.ok(t, append([]string{"limits", "list", "--json"}, args...)...)
	var ls []limitView
	require.NoError(t, json.Unmarshal([]byte(out), &ls), out)
	return ls
}

func testLimitsCmd(t *testing.T, c *cli) {
	p := redistest.UniqueName(t)
	c.refused(t, 1, `queue "emails" not found`, "limits", "set", "emails", "--prefix", p, "--concurrency", "1")
	c.publishOne(t, "--prefix", p, "-q", "emails", "--type", "send")

	require.Equal(t, "queue emails: type send, per limit key: rate 5/500ms, concurrency 1\n",
		c.ok(t, "limits", "set", "emails", "--prefix", p, "--type", "send", "--per-key", "--rate", "5/500ms", "--concurrency", "1"))
	c.ok(t, "limits", "set", "emails", "--prefix", p, "--rate", "100/s")
	want := []limitView{
		{Queue: "emails", Rate: 100, IntervalMS: 1000},
		{Queue: "emails", Type: "send", PerKey: true, Rate: 5, IntervalMS: 500, Concurrency: 1},
	}
	require.Equal(t, want, c.limits(t, "--prefix", p))
	require.Equal(t, want, c.limits(t, "emails", "--prefix", p))

	c.ok(t, "limits", "delete", "emails", "--prefix", p, "--type", "send", "--per-key")
	require.Equal(t, want[:1], c.limits(t, "--prefix", p))
	c.refused(t, 1, "queue emails has no limit for type send, per limit key: nothing to delete",
		"limits", "delete", "emails", "--prefix", p, "--type", "send", "--per-key")
	c.refused(t, 2, `invalid argument "5/d" for "--rate" flag`, "limits", "set", "emails", "--prefix", p, "--rate", "5/d")
}
