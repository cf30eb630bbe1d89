package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// TestPublishJSONL: the good lines are published whatever the bad ones are; each bad line is
// named with its number and reason; the command exits 1 when any line failed; --json gives one
// object per line.
func TestPublishJSONL(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t) // a queue of its own: job ids are the queue's
	rdb := srv.Client(t)
	jq := redistest.UniqueName(t)
	// Line 6's id is taken by a job of another type: Redis refuses that line alone.
	taken, stderr, code := runInProcess(t, "", "--redis", srv.URL(), "publish", "-q", jq, "--type", "other", "--id", "taken")
	require.Zero(t, code, stderr)
	require.Equal(t, "taken\n", taken)
	input := strings.Join([]string{
		`{"type":"echo","payload":{"n":1}}`,
		`{"type":"echo","payload":{"n":2},"id":"mine","delay":"1h"}`,
		``,
		`{"payload":{"n":3}}`,
		`not json`,
		`{"type":"echo","id":"taken"}`,
		`{"type":"echo","colour":"blue"}`,
		`{"type":"bad type!"}`,
		`{"type":"echo","run_at":"2126-01-01T00:00:00Z","metadata":{"k":"v"}}`,
	}, "\n") + "\n"
	out, stderr, code := runInProcess(t, input, "--redis", srv.URL(), "publish", "-q", jq, "--jsonl", "-")
	require.Equal(t, 1, code, stderr)
	ids := strings.Fields(out)
	require.Len(t, ids, 3, out)
	require.Equal(t, "mine", ids[1])
	for _, want := range []string{
		"conveyor: line 4: type is required",
		"conveyor: line 5: ",
		"conveyor: line 6: ",
		"conveyor: line 7: ",
		"conveyor: line 8: ",
		"published 3 jobs from 9 lines of standard input\n",
		"conveyor: 5 of 9 lines failed",
	} {
		require.Contains(t, stderr, want)
	}
	require.Contains(t, stderr, `colour`, "the unknown field is named")
	require.NotContains(t, stderr, "line 3:", "a blank line is no job")
	require.NotContains(t, stderr, "pipeline: ")
	st, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	stats, err := st.Stats(t.Context(), jq)
	require.NoError(t, err)
	require.EqualValues(t, 2, stats.Queued, "line 1 and taken's own job")
	require.EqualValues(t, 2, stats.Scheduled, "lines 2 and 9")

	// Again with --json: every line once, in order; the jobs with ids are there already.
	out, stderr, code = runInProcess(t, input, "--redis", srv.URL(), "publish", "-q", jq, "--jsonl", "-", "--json")
	require.Equal(t, 1, code, stderr)
	var got []jsonlResult
	for line := range strings.Lines(out) {
		var r jsonlResult
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		got = append(got, r)
	}
	require.Len(t, got, 8, out)
	lines := make([]int, len(got))
	for i, r := range got {
		lines[i] = r.Line
	}
	require.Equal(t, []int{1, 2, 4, 5, 6, 7, 8, 9}, lines)
	require.True(t, got[0].Created)
	require.Equal(t, jsonlResult{Line: 2, ID: "mine"}, got[1], "published again: not created")
	require.Contains(t, got[4].Error, "taken")
	require.NotContains(t, stderr, "conveyor: line ", "with --json the errors are in the JSON")
}

// TestPublishJSONLBatches: more lines than a batch holds, one bad line among them, all the
// others published in order.
func TestPublishJSONLBatches(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	big := redistest.UniqueName(t)
	var b strings.Builder
	const n = publishChunk + 10
	for i := range n {
		if i == 700 {
			b.WriteString(`{"type":"echo","max_retries":-1}` + "\r\n")
			continue
		}
		b.WriteString(`{"type":"echo"}` + "\r\n")
	}
	out, stderr, code := runInProcess(t, b.String(), "--redis", srv.URL(), "publish", "-q", big, "--jsonl", "-")
	require.Equal(t, 1, code, stderr)
	require.Len(t, strings.Fields(out), n-1)
	require.Contains(t, stderr, "conveyor: line 701: ")
	require.Contains(t, stderr, "published 1009 jobs from 1010 lines")
	stats, stderr, code := runInProcess(t, "", "--redis", srv.URL(), "stats", "-q", big, "--json")
	require.Zero(t, code, stderr)
	require.Contains(t, stats, `"queued":1009`)
}

// TestPublishJSONLRefusals: usage errors (exit 2) before anything is read or written.
func TestPublishJSONLRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--jsonl", "-", "--type", "echo"}, "--jsonl takes each job's fields from its line: --type cannot be used with it"},
		{[]string{"--jsonl", "-", "--count", "2", "--meta", "a=b"}, "--count, --meta cannot be used with it"},
		{[]string{"--jsonl", ""}, "--jsonl needs a file name"},
		{[]string{"--jsonl", "/no/such/file.jsonl"}, "--jsonl: open /no/such/file.jsonl"},
		{nil, "required flag --type not set"},
	} {
		_, stderr, code := runInProcess(t, "", append([]string{"--redis", noRedis, "publish"}, tc.args...)...)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.msg)
	}
}

func TestReadLine(t *testing.T) {
	t.Parallel()
	const limit = 8
	type line struct {
		text    string
		tooLong bool
	}
	for _, tc := range []struct {
		name string
		in   string
		want []line
	}{
		{"Empty", "", []line{{text: ""}}},
		{"OneNoNewline", "abc", []line{{text: "abc"}}},
		{"OneNewline", "abc\n", []line{{text: "abc"}, {text: ""}}},
		{"CRLF", "a\r\nb\r\n", []line{{text: "a"}, {text: "b"}, {text: ""}}},
		{"AtLimit", "12345678\n", []line{{text: "12345678"}, {text: ""}}},
		{"OverLimit", "123456789\nok\n", []line{{tooLong: true}, {text: "ok"}, {text: ""}}},
		{"HugeThenOK", strings.Repeat("x", 100000) + "\nok", []line{{tooLong: true}, {text: "ok"}}},
		{"HugeAtEnd", strings.Repeat("x", 100000), []line{{tooLong: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := bufio.NewReaderSize(strings.NewReader(tc.in), 16)
			var got []line
			for {
				b, err := readLine(r, limit)
				got = append(got, line{text: string(b), tooLong: errors.Is(err, errLineTooLong)})
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil && !errors.Is(err, errLineTooLong) {
					t.Fatal(err)
				}
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// FuzzParseJSONLLine: a line is a job or an error, never a panic; a job has a type, and an
// error is one line of text, fit to follow "line N: ".
func FuzzParseJSONLLine(f *testing.F) {
	for _, s := range []string{
		`{"type":"echo"}`,
		`{"type":"echo","payload":{"a":[1,2]},"id":"x","delay":"1s","max_retries":3}`,
		`{"type":"e","run_at":"2026-12-01T09:00:00Z","unique":{"key":"k","ttl":"1h"}}`,
		`{"type":"e","debounce":{"key":"k","quiet":"1s","max_wait":"2s"},"priority":2}`,
		`{"type":"e","metadata":{"a":"b"},"limit_key":"l","group":"g","retention":"1h"}`,
		`{"type":"e"} {}`, `[]`, `null`, `{"type":1}`, "{\"type\":\"\xff\"}", `{"payload":`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		task, _, err := parseJSONLLine(line)
		if err != nil {
			msg := err.Error()
			if msg == "" || !utf8.ValidString(msg) {
				t.Fatalf("error %q for %q", msg, line)
			}
			return
		}
		if task.Type == "" {
			t.Fatalf("a job without a type from %q", line)
		}
	})
}
