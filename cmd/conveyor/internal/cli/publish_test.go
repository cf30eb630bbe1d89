package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

func TestReadPayload(t *testing.T) {
	t.Parallel()
	const limit = 16
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return "@" + p
	}
	for _, tc := range []struct {
		name    string
		arg     string
		stdin   string
		want    string // the payload when err is ""
		err     string
		tooBig  bool // the error is ErrPayloadTooLarge
		invalid bool // the error says "not valid JSON"
	}{
		{name: "Object", arg: `{"a":1}`, want: `{"a":1}`},
		{name: "Array", arg: `[1,2]`, want: `[1,2]`},
		{name: "String", arg: `"x"`, want: `"x"`},
		{name: "Number", arg: `-1.5e3`, want: `-1.5e3`},
		{name: "Null", arg: `null`, want: `null`},
		{name: "InlineKeptExactly", arg: " {\"a\" : 1}\n", want: " {\"a\" : 1}\n"},
		{name: "Malformed", arg: `{a:1}`, invalid: true, err: "--payload is not valid JSON: invalid character 'a' looking for beginning of object key string (at byte 2)"},
		{name: "Truncated", arg: `{"a":`, invalid: true},
		{name: "TwoValues", arg: `{}{}`, invalid: true},
		{name: "Bare", arg: `hello`, invalid: true},
		{name: "Empty", arg: ``, err: "--payload is empty"},
		{name: "Blank", arg: ` `, invalid: true},
		{name: "InlineAtLimit", arg: `"` + strings.Repeat("a", limit-2) + `"`, want: `"` + strings.Repeat("a", limit-2) + `"`},
		{name: "InlineOverLimit", arg: `"` + strings.Repeat("a", limit-1) + `"`, tooBig: true, err: "has 17 bytes, the limit is 16"},

		{name: "File", arg: file("ok.json", "{\"f\":true}\n"), want: `{"f":true}`},
		{name: "FileMalformed", arg: file("bad.json", "{\"f\":"), invalid: true, err: "payload file " + filepath.Join(dir, "bad.json") + " is not valid JSON"},
		{name: "FileEmpty", arg: file("empty.json", ""), err: "is empty"},
		{name: "FileOnlySpace", arg: file("space.json", " \n\t"), err: "is empty"},
		{name: "FileMissing", arg: "@" + filepath.Join(dir, "missing.json"), err: "no such file"},
		{name: "FileAtLimitWithNewline", arg: file("limit.json", `"`+strings.Repeat("b", limit-2)+"\"\n"), want: `"` + strings.Repeat("b", limit-2) + `"`},
		{name: "FileOverLimit", arg: file("big.json", `"`+strings.Repeat("b", limit-1)+`"`), tooBig: true},
		{name: "FileHuge", arg: file("huge.json", `"`+strings.Repeat("b", 10000)+`"`), tooBig: true, err: "holds more than 16 bytes"},
		{name: "FileFormFeedIsNotJSONSpace", arg: file("ff.json", "\f1"), invalid: true},
		{name: "NoFileName", arg: "@", err: "needs a file name"},

		{name: "Stdin", arg: "@-", stdin: "[true]\r\n", want: `[true]`},
		{name: "StdinMalformed", arg: "@-", stdin: "[true", invalid: true, err: "standard input (--payload @-) is not valid JSON"},
		{name: "StdinEmpty", arg: "@-", stdin: "", err: "standard input (--payload @-) is empty"},
		{name: "StdinOverLimit", arg: "@-", stdin: strings.Repeat("1", limit+1), tooBig: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := readPayload(tc.arg, strings.NewReader(tc.stdin), limit)
			if tc.err == "" && !tc.tooBig && !tc.invalid {
				require.NoError(t, err)
				require.Equal(t, tc.want, string(got))
				return
			}
			require.Error(t, err)
			require.Nil(t, got)
			require.Contains(t, err.Error(), tc.err)
			require.Equal(t, tc.tooBig, errorIsTooLarge(err), err.Error())
			require.Equal(t, tc.invalid, strings.Contains(err.Error(), "not valid JSON"), err.Error())
		})
	}
}

func errorIsTooLarge(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), pipeline.ErrPayloadTooLarge.Error())
}

// FuzzPayloadArg checks that --payload never panics and accepts exactly the valid JSON within
// the size limit: inline byte for byte, from standard input without surrounding JSON
// whitespace.
func FuzzPayloadArg(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[]`, `{`, ``, ` `, `@-`, `@`, `"\u00e9"`, " 1 ", "\f1", `{"a":1}{}`,
		`1e999`, "\"\xff\"", `{"a":[1,{"b":null}]}`, "nul", `-0`, `01`} {
		f.Add([]byte(s))
	}
	const limit = 1 << 10
	f.Fuzz(func(t *testing.T, data []byte) {
		valid := json.Valid(data)
		trimmed := bytes.Trim(data, jsonSpace)

		if !bytes.HasPrefix(data, []byte("@")) { // "@..." names a file or stdin
			got, err := readPayload(string(data), nil, limit)
			if want := valid && len(data) <= limit; want != (err == nil) {
				t.Fatalf("inline %q: valid %v, got error %v", data, valid, err)
			}
			if err == nil && !bytes.Equal(got, data) {
				t.Fatalf("inline %q: payload %q", data, got)
			}
		}

		got, err := readPayload("@-", bytes.NewReader(data), limit)
		if want := valid && len(trimmed) <= limit; want != (err == nil) {
			t.Fatalf("stdin %q: valid %v, got error %v", data, valid, err)
		}
		if err == nil && !bytes.Equal(got, trimmed) {
			t.Fatalf("stdin %q: payload %q", data, got)
		}
	})
}

func TestPublishRequest(t *testing.T) {
	t.Parallel()
	base := func() publishFlags {
		return publishFlags{queue: "q", jobType: "echo", count: 1, maxRetries: 5, uniqueTTL: defaultUniqueTTL, priority: 1}
	}
	for _, tc := range []struct {
		name  string
		edit  func(*publishFlags)
		err   string
		check func(*testing.T, *publishRequest)
	}{
		{name: "Defaults", edit: func(*publishFlags) {}, check: func(t *testing.T, r *publishRequest) {
			require.Equal(t, 1, r.count)
			require.Nil(t, r.task.Payload)
			require.Empty(t, r.opts)
		}},
		{name: "AllOptions", edit: func(pf *publishFlags) {
			pf.payloadGiven, pf.payload = true, `{"x":1}`
			pf.id, pf.delay, pf.maxRetriesGiven, pf.maxRetries = "job-1", time.Minute, true, 0
			pf.timeout, pf.unique = time.Second, "k"
			pf.meta = []string{"a=1", "b=x=y", "c="}
		}, check: func(t *testing.T, r *publishRequest) {
			require.Equal(t, `{"x":1}`, string(r.task.Payload))
			require.Equal(t, map[string]string{"a": "1", "b": "x=y", "c": ""}, r.task.Metadata)
			require.Len(t, r.opts, 5)
		}},
		{name: "ZeroDelayIsNoDelay", edit: func(pf *publishFlags) { pf.delay = 0 }, check: func(t *testing.T, r *publishRequest) {
			require.Empty(t, r.opts)
		}},
		{name: "Count", edit: func(pf *publishFlags) { pf.count = 2500 }, check: func(t *testing.T, r *publishRequest) {
			require.Equal(t, 2500, r.count)
		}},
		{name: "NegativeDelay", edit: func(pf *publishFlags) { pf.delay = -time.Second }, err: "--delay must not be negative, not -1s"},
		{name: "NegativeRetries", edit: func(pf *publishFlags) { pf.maxRetriesGiven, pf.maxRetries = true, -1 }, err: "--max-retries must not be negative"},
		{name: "NegativeTimeout", edit: func(pf *publishFlags) { pf.timeout = -1 }, err: "--timeout must not be negative"},
		{name: "Priority", edit: func(pf *publishFlags) { pf.priority = 4 }, check: func(t *testing.T, r *publishRequest) {
			require.Len(t, r.opts, 1)
		}},
		{name: "PriorityOneIsTheDefault", edit: func(pf *publishFlags) { pf.priority = 1 }, check: func(t *testing.T, r *publishRequest) {
			require.Empty(t, r.opts)
		}},
		{name: "PriorityZero", edit: func(pf *publishFlags) { pf.priority = 0 }, err: "--priority must be 1 (served first) to 4, not 0"},
		{name: "PriorityTooHigh", edit: func(pf *publishFlags) { pf.priority = 5 }, err: "--priority must be 1 (served first) to 4, not 5"},
		{name: "CountZero", edit: func(pf *publishFlags) { pf.count = 0 }, err: "--count must be at least 1, not 0"},
		{name: "CountNegative", edit: func(pf *publishFlags) { pf.count = -3 }, err: "--count must be at least 1, not -3"},
		{name: "IDWithCount", edit: func(pf *publishFlags) { pf.id, pf.count = "x", 2 }, err: "--id names one job"},
		{name: "UniqueWithCount", edit: func(pf *publishFlags) { pf.unique, pf.count = "x", 2 }, err: "--unique lets only one job"},
		{name: "UniqueTTLAlone", edit: func(pf *publishFlags) { pf.uniqueTTLGiven = true }, err: "--unique-ttl needs --unique"},
		{name: "UniqueTTLZero", edit: func(pf *publishFlags) { pf.unique, pf.uniqueTTL = "x", 0 }, err: "--unique-ttl must be positive"},
		{name: "MetaNoEquals", edit: func(pf *publishFlags) { pf.meta = []string{"a"} }, err: `--meta "a": want key=value`},
		{name: "MetaEmptyKey", edit: func(pf *publishFlags) { pf.meta = []string{"=v"} }, err: `--meta "=v": want key=value`},
		{name: "MetaTwice", edit: func(pf *publishFlags) { pf.meta = []string{"a=1", "a=2"} }, err: `key "a" given twice`},
		{name: "Debounce", edit: func(pf *publishFlags) {
			pf.debounce, pf.debounceQuiet, pf.debounceMaxWait = "doc-1", time.Second, time.Minute
		}, check: func(t *testing.T, r *publishRequest) {
			require.Len(t, r.opts, 1)
		}},
		{name: "DebounceQuietAlone", edit: func(pf *publishFlags) { pf.debounceQuiet = time.Second }, err: "--debounce-quiet and --debounce-max-wait need --debounce KEY"},
		{name: "DebounceWithoutQuiet", edit: func(pf *publishFlags) { pf.debounce, pf.debounceMaxWait = "k", time.Second }, err: "--debounce needs --debounce-quiet"},
		{name: "DebounceWithID", edit: func(pf *publishFlags) {
			pf.debounce, pf.debounceQuiet, pf.debounceMaxWait, pf.id = "k", time.Second, time.Second, "x"
		}, err: "--debounce cannot be combined with --id"},
		{name: "MalformedPayload", edit: func(pf *publishFlags) { pf.payloadGiven, pf.payload = true, "{" }, err: "not valid JSON"},
		{name: "FlagErrorsComeFirst", edit: func(pf *publishFlags) {
			pf.payloadGiven, pf.payload, pf.count = true, "@-", 0
		}, err: "--count must be at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pf := base()
			tc.edit(&pf)
			r, err := pf.request(strings.NewReader(""))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, "echo", r.task.Type)
			tc.check(t, r)
		})
	}
}

// TestPublishDebounce: publishes with one --debounce key print one id; the later ones say on
// stderr (and with --json) that they joined the pending job.
func TestPublishDebounce(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t) // a queue of its own is isolation enough
	args := []string{"--redis", srv.URL(), "publish", "--queue", redistest.UniqueName(t), "--type", "reindex",
		"--debounce", "doc-1", "--debounce-quiet", "1h", "--debounce-max-wait", "2h", "--json"}
	out1, stderr, code := runInProcess(t, "", append(args, "--payload", `{"rev":1}`)...)
	require.Zero(t, code, stderr)
	out2, stderr, code := runInProcess(t, "", append(args, "--payload", `{"rev":2}`)...)
	require.Zero(t, code, stderr)
	require.Contains(t, stderr, "debounced: this publish replaced its payload (publish 2 of its window")
	var a, b struct {
		ID        string `json:"id"`
		Created   bool   `json:"created"`
		Debounced bool   `json:"debounced"`
	}
	require.NoError(t, json.Unmarshal([]byte(out1), &a))
	require.NoError(t, json.Unmarshal([]byte(out2), &b))
	require.Equal(t, a.ID, b.ID)
	require.True(t, a.Created)
	require.False(t, a.Debounced)
	require.False(t, b.Created)
	require.True(t, b.Debounced)
}

// TestPublishPriority: --priority sets the job's level, which status shows; a level out of
// range is a usage error (exit 2) and writes nothing.
func TestPublishPriority(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	pq := redistest.UniqueName(t)
	out, stderr, code := runInProcess(t, "", "--redis", srv.URL(), "publish", "--queue", pq, "--type", "echo", "--priority", "3")
	require.Zero(t, code, stderr)
	id := strings.TrimSpace(out)
	out, stderr, code = runInProcess(t, "", "--redis", srv.URL(), "status", "--queue", pq, id)
	require.Zero(t, code, stderr)
	require.Regexp(t, `(?m)^priority:\s+3$`, out)
	for _, p := range []string{"0", "5", "high"} {
		_, stderr, code = runInProcess(t, "", "--redis", srv.URL(), "publish", "--queue", pq, "--type", "echo", "--priority", p)
		require.Equal(t, 2, code, stderr)
		require.Contains(t, stderr, "priority")
	}
	out, stderr, code = runInProcess(t, "", "--redis", srv.URL(), "stats", "--queue", pq, "--json")
	require.Zero(t, code, stderr)
	require.Contains(t, out, `"enqueued":1`, "the refused publishes wrote nothing")
}

// TestPublishTraceparent: --traceparent, else $TRACEPARENT (with $TRACESTATE), is the trace
// context the job carries in its metadata (the flag wins); a malformed flag is a usage error
// and writes nothing, a malformed variable is ignored with a note.
func TestPublishTraceparent(t *testing.T) {
	t.Parallel()
	const (
		flagTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		envTP  = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	)
	srv := redistest.Shared(t)
	tq := redistest.UniqueName(t)
	publish := func(env map[string]string, extra ...string) map[string]string {
		t.Helper()
		out, stderr, code := runWithEnv(t, env, "", append([]string{"--redis", srv.URL(), "publish", "--queue", tq, "--type", "echo"}, extra...)...)
		require.Zero(t, code, stderr)
		out, stderr, code = runInProcess(t, "", "--redis", srv.URL(), "status", "--queue", tq, "--json", strings.TrimSpace(out))
		require.Zero(t, code, stderr)
		var j struct {
			Metadata map[string]string `json:"metadata"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &j))
		return j.Metadata
	}
	require.Equal(t, flagTP, publish(nil, "--traceparent", flagTP)["traceparent"])
	md := publish(map[string]string{"TRACEPARENT": envTP, "TRACESTATE": "v=1"})
	require.Equal(t, envTP, md["traceparent"])
	require.Equal(t, "v=1", md["tracestate"])
	require.Equal(t, flagTP, publish(map[string]string{"TRACEPARENT": envTP}, "--traceparent", flagTP)["traceparent"], "the flag wins")
	require.NotContains(t, publish(nil), "traceparent")

	_, stderr, code := runInProcess(t, "", "--redis", srv.URL(), "publish", "--queue", tq, "--type", "echo", "--traceparent", "nonsense")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "not a W3C traceparent")
	_, stderr, code = runWithEnv(t, map[string]string{"TRACEPARENT": "00-zz"}, "", "--redis", srv.URL(), "publish", "--queue", tq, "--type", "echo")
	require.Zero(t, code, stderr)
	require.Contains(t, stderr, "ignoring $TRACEPARENT")
}
