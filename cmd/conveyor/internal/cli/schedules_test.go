package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
)

func TestParseCronFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, spec, typ, payload, err string
	}{
		{in: "@every 1s echo", spec: "@every 1s", typ: "echo"},
		{in: `@every 1m echo {"a": "b c"}`, spec: "@every 1m", typ: "echo", payload: `{"a": "b c"}`},
		{in: "@daily report", spec: "@daily", typ: "report"},
		{in: "0 0 3 * * * report", spec: "0 0 3 * * *", typ: "report"},
		{in: "0 3 * * * report {}", spec: "0 3 * * *", typ: "report", payload: "{}"},
		{in: "*/5 * * * * * tick [1,2]", spec: "*/5 * * * * *", typ: "tick", payload: "[1,2]"},
		{in: "CRON_TZ=Europe/Berlin 0 0 9 * * 1-5 standup", spec: "CRON_TZ=Europe/Berlin 0 0 9 * * 1-5", typ: "standup"},
		{in: "CRON_TZ=Europe/Berlin 0 9 * * 1-5 standup", spec: "CRON_TZ=Europe/Berlin 0 9 * * 1-5", typ: "standup"},
		{in: "@every 1s", err: "want 'SPEC TYPE [PAYLOAD]'"},
		{in: "", err: "want 'SPEC TYPE [PAYLOAD]'"},
		{in: "@every 10ms echo", err: "whole seconds"},
		{in: "61 * * * * echo", err: "61"},
		{in: "@every 1s echo {not json", err: "not valid JSON"},
	} {
		p, err := parseCronFlag(tc.in, "q")
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.spec, p.Spec, tc.in)
		require.Equal(t, tc.typ, p.Type, tc.in)
		require.Equal(t, tc.payload, string(p.Payload), tc.in)
		require.Equal(t, "q", p.Queue)
		require.True(t, strings.HasPrefix(p.Name, "cron-"+tc.typ+"-"), p.Name)
	}
	// The same flag names the same schedule in every worker; another queue or flag another.
	a, _ := parseCronFlag("@every 1s echo", "q")
	b, _ := parseCronFlag("@every  1s echo", "q")
	c, _ := parseCronFlag("@every 1s echo", "r")
	require.Equal(t, a.Name, b.Name)
	require.NotEqual(t, a.Name, c.Name)
	long, err := parseCronFlag("@every 1s "+strings.Repeat("t", 100), "q")
	require.NoError(t, err)
	require.LessOrEqual(t, len(long.Name), 64)
}

func FuzzParseCronFlag(f *testing.F) {
	for _, s := range []string{"@every 1s echo", "0 0 3 * * * report {}", "CRON_TZ=UTC 0 3 * * * r [1]", "TZ= x y"} {
		f.Add(s)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: NewWorker only checks
	f.Cleanup(func() { rdb.Close() })
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parseCronFlag(s, "q")
		if err != nil {
			return
		}
		// What the flag accepts, a worker accepts.
		if _, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Periodic: []pipeline.Periodic{p}}); err != nil && !strings.Contains(err.Error(), "type") {
			t.Fatalf("%q: flag accepted, worker refused: %v", s, err)
		}
		if len(p.Payload) > 0 && !json.Valid(p.Payload) {
			t.Fatalf("%q: payload %q", s, p.Payload)
		}
	})
}

func TestSchedulesCommands(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	ok, refused := c.ok, c.refused

	require.Equal(t, "no schedules\n", ok("schedules", "list"))
	require.Equal(t, "[]\n", ok("schedules", "list", "--json"))
	out := ok("schedules", "create", "nightly", "--spec", "0 0 3 * * *", "--queue", "reports", "--type", "report", "--payload", `{"kind":"daily"}`)
	require.Contains(t, out, "schedule nightly: 0 0 3 * * * -> queue reports, type report; next run 20")
	ok("schedules", "create", "beat", "--spec", "@every 30s", "--type", "echo", "--missed", "once")
	require.Equal(t, "schedule beat: paused\n", ok("schedules", "pause", "beat"))

	list := ok("schedules", "list")
	require.Contains(t, list, "NAME     SPEC         QUEUE    TYPE    MISSED  STATE   LAST_RUN  LAST_JOB  NEXT_RUN\n")
	require.Contains(t, list, "beat     @every 30s   default  echo    once    paused  -         -         -\n")
	require.Contains(t, list, "nightly  0 0 3 * * *  reports  report  skip    active  -         -         20")
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(ok("schedules", "list", "--json")), &rows))
	require.Len(t, rows, 2)
	require.Equal(t, map[string]any{"name": "beat", "spec": "@every 30s", "queue": "default", "type": "echo", "missed": "once",
		"source": "api", "paused": true, "last_run_at": nil, "last_tick": nil, "last_job": "", "next_run_at": nil}, rows[0])
	require.Equal(t, map[string]any{"kind": "daily"}, rows[1]["payload"])

	require.Equal(t, "schedule beat: resumed\n", ok("schedules", "resume", "beat"))
	require.Equal(t, "schedule beat: deleted\n", ok("schedules", "delete", "beat"))
	refused(1, `schedule not found: "beat"`, "schedules", "delete", "beat")
	refused(1, `schedule not found: "beat"`, "schedules", "pause", "beat")
	refused(1, `schedule not found: "beat"`, "schedules", "resume", "beat")

	// The names complete, with spec, queue and state; nothing when Redis does not answer.
	got, _ := completeInProcess(t, "schedules", "pause", "--redis", c.url, "--prefix", c.prefix, "")
	require.Equal(t, []string{"nightly\t0 0 3 * * * -> reports"}, got)
	ok("schedules", "pause", "nightly")
	got, _ = completeInProcess(t, "schedules", "delete", "--redis", c.url, "--prefix", c.prefix, "ni")
	require.Equal(t, []string{"nightly\t0 0 3 * * * -> reports (paused)"}, got)
	got, _ = completeInProcess(t, "schedules", "resume", "--redis", noRedis, "")
	require.Empty(t, got)

	// Refused as written: exit 2.
	refused(2, "--spec is required", "schedules", "create", "x", "--type", "t")
	refused(2, "--type is required", "schedules", "create", "x", "--spec", "@daily")
	refused(2, `invalid schedule name "a:b"`, "schedules", "create", "a:b", "--spec", "@daily", "--type", "t")
	refused(2, "--missed must be skip or once", "schedules", "create", "x", "--spec", "@daily", "--type", "t", "--missed", "twice")
	refused(2, "whole seconds", "schedules", "create", "x", "--spec", "@every 10ms", "--type", "t")
	refused(1, "is not valid JSON", "schedules", "create", "x", "--spec", "@daily", "--type", "t", "--payload", "{")
	refused(2, "want exactly one schedule name", "schedules", "delete")
	refused(2, `invalid schedule name "a b"`, "schedules", "pause", "a b")
}

// schedules list pages with --limit and --cursor, as list does: the next cursor on stderr.
func TestSchedulesListPaged(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	for _, n := range []string{"c", "a", "b"} {
		c.ok("schedules", "create", n, "--spec", "@daily", "--type", "t")
	}
	out, errOut, code := c.run("schedules", "list", "--limit", "2")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "\na ")
	require.Contains(t, out, "\nb ")
	require.NotContains(t, out, "\nc ")
	require.Equal(t, "next page: --cursor b\n", errOut)
	var page struct {
		Schedules []map[string]any `json:"schedules"`
		Next      string           `json:"next"`
	}
	require.NoError(t, json.Unmarshal([]byte(c.ok("schedules", "list", "--cursor", "b", "--json")), &page))
	require.Len(t, page.Schedules, 1)
	require.Equal(t, "c", page.Schedules[0]["name"])
	require.Empty(t, page.Next)
	var all []map[string]any
	require.NoError(t, json.Unmarshal([]byte(c.ok("schedules", "list", "--json")), &all))
	require.Len(t, all, 3, "without --limit, all of them")
	c.refused(2, "--limit must be 1 to 1000", "schedules", "list", "--limit", "0")
	c.refused(2, "not one of a schedules listing", "schedules", "list", "--cursor", "a:b")
}
