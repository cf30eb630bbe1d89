package torture

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// Records written by Writers of several processes read back whole, in order per file; a torn
// last line is counted, not fatal; any other bad line is.
func TestLedgerRoundTrip(t *testing.T) {
	dir := t.TempDir()
	a, err := OpenWriter(dir, "a")
	require.NoError(t, err)
	b, err := OpenWriter(dir, "b")
	require.NoError(t, err)
	want := []Record{
		{Kind: Ack, ID: "j1", At: 1, Due: 1_790_000_000_000, Expect: "completed", Need: 1},
		{Kind: Start, ID: "j1", Attempt: 1, PID: 42, At: 2, Sum: "0123456789abcdef"},
		{Kind: Finish, ID: "j1", Attempt: 1, PID: 42, At: 3, Outcome: "ok"},
		{Kind: Commit, ID: "j1", Attempt: 1, PID: 42, At: 4, Outcome: "completed"},
		{Kind: Observed, ID: "j1", Attempt: 1, At: 5, Outcome: "completed", Key: "k2", Sum: "0123456789abcdef", ResultKey: "k2", ResultSum: "0123456789abcdef"},
		{Kind: Indeterminate, ID: "j2", At: 6},
	}
	for i, r := range want {
		w := a
		if i%2 == 1 {
			w = b
		}
		require.NoError(t, w.Write(r))
	}
	require.NoError(t, a.Close())
	require.NoError(t, a.Close(), "Close is idempotent")
	require.Error(t, a.Write(want[0]), "a closed writer refuses")
	require.NoError(t, b.Close())
	got, torn, err := ReadDir(dir)
	require.NoError(t, err)
	require.Zero(t, torn)
	require.ElementsMatch(t, want, got)

	f, err := os.OpenFile(filepath.Join(dir, "a.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"k":"start","id":"j3","a":1,"pi`)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	got, torn, err = ReadDir(dir)
	require.NoError(t, err)
	require.Equal(t, 1, torn)
	require.Len(t, got, len(want))

	require.NoError(t, os.WriteFile(filepath.Join(dir, "c.jsonl"), []byte("{\"k\":\"nope\",\"id\":\"x\",\"t\":1}\n"), 0o600))
	_, _, err = ReadDir(dir)
	require.ErrorContains(t, err, `c.jsonl:1: ledger: unknown kind "nope"`)
}

func TestParseLineRefuses(t *testing.T) {
	for _, line := range []string{
		``,
		`{}`,
		`{"k":"start","id":"a","t":1,"extra":1}`,
		`{"k":"start","id":"a","t":1} {"k":"start","id":"a","t":1}`,
		`{"k":"start","id":"a b","t":1}`,
		`{"k":"start","id":"","t":1}`,
		`{"k":"start","id":"a","t":-1}`,
		`{"k":"start","id":"a","t":1,"a":-2}`,
		`{"k":"finish","id":"a","t":1,"o":"maybe"}`,
		`{"k":"start","id":"a","t":1,"o":"ok"}`,
		`{"k":"ack","id":"a","t":1,"x":"queued"}`,
		`{"k":"finish","id":"a","t":1,"o":"ok","sum":"00"}`,
		`{"k":"start","id":"a","t":1,"key":"k2"}`,
		`{"k":"ack","id":"a","t":1,"rsum":"00"}`,
		`[1]`,
	} {
		_, err := ParseLine([]byte(line))
		require.Error(t, err, line)
	}
	r, err := ParseLine([]byte(`{"k":"commit","id":"a.b:c-1","a":2,"pid":7,"t":9,"o":"dead"}`))
	require.NoError(t, err)
	require.Equal(t, Record{Kind: Commit, ID: "a.b:c-1", Attempt: 2, PID: 7, At: 9, Outcome: "dead"}, r)
}

// FuzzParseLine: the parser never panics, and what it accepts it writes back to a line it
// reads as the same record.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		`{"k":"ack","id":"j1","t":1,"due":1790000000000,"x":"completed","n":1}`,
		`{"k":"start","id":"j1","a":1,"pid":42,"t":2}`,
		`{"k":"finish","id":"j1","a":1,"pid":42,"t":3,"o":"error"}`,
		`{"k":"commit","id":"j1","a":1,"pid":42,"t":4,"o":"retry"}`,
		`{"k":"observed","id":"j1","a":3,"t":5,"o":"missing"}`,
		`{"k":"observed","id":"j1","a":1,"t":5,"o":"completed","sum":"0123","key":"k2","rkey":"k2","rsum":"0123"}`,
		`{"k":"start","id":"j1","a":1,"pid":42,"t":2,"sum":"0123456789abcdef"}`,
		`{"k":"indeterminate","id":"j2","t":6}`,
		`{"k":"start","id":"j1","a":1e3,"t":2}`,
		`{"k":"start","id":"j1","t":2,"t":3}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := ParseLine(line)
		if err != nil {
			return
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseLine(b)
		if err != nil {
			t.Fatalf("%s parsed, its rewrite %s did not: %v", line, b, err)
		}
		if !reflect.DeepEqual(again, r) {
			t.Fatalf("%s: %+v, rewritten %+v", line, r, again)
		}
	})
}
