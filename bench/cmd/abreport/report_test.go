package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// canned writes a compare -json-out file with Conveyor's figures fields and the ratios to raw,
// and returns its path.
func canned(t *testing.T, name string, fields map[string]float64, ratios map[string]float64, extra string) string {
	t.Helper()
	var conv, rat []string
	for k, v := range fields {
		conv = append(conv, `"`+k+`": `+strconv.FormatFloat(v, 'g', -1, 64))
	}
	for k, v := range ratios {
		rat = append(rat, `"`+k+`": `+strconv.FormatFloat(v, 'g', -1, 64))
	}
	doc := `{"machine": {"loadavg_start": 0.5}, "config": {"jobs": 1000, "rounds": 1, "systems": ["conveyor", "raw"]}, ` +
		`"systems": {"conveyor": {` + strings.Join(conv, ", ") + `}, "raw": {"e2e_jobs_per_s": 1}}, ` +
		`"ratios": {` + strings.Join(rat, ", ") + `}` + extra + `}`
	path := filepath.Join(t.TempDir(), name)
	must(t, os.WriteFile(path, []byte(doc), 0o600))
	return path
}

func rowOf(t *testing.T, rep Report, key string) Row {
	t.Helper()
	for _, r := range rep.Rows {
		if r.Key == key {
			return r
		}
	}
	t.Fatalf("no row %s", key)
	return Row{}
}

func vals(xs []*float64) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		if x == nil {
			out[i] = nil
		} else {
			out[i] = *x
		}
	}
	return out
}

func TestBuild(t *testing.T) {
	type side = map[string]float64
	cases := []struct {
		name   string
		a, b   []side // the pairs' A and B figures, in run order
		key    string
		ratios []any // nil where the pair has no ratio
		median any   // nil when no pair has one
	}{
		{
			name: "one pair", key: "e2e_jobs_per_s",
			a:      []side{{"e2e_jobs_per_s": 40000}},
			b:      []side{{"e2e_jobs_per_s": 50000}},
			ratios: []any{0.8}, median: 0.8,
		},
		{
			name: "the median of three is the middle ratio, not of the middle pair", key: "e2e_jobs_per_s",
			a:      []side{{"e2e_jobs_per_s": 30}, {"e2e_jobs_per_s": 10}, {"e2e_jobs_per_s": 20}},
			b:      []side{{"e2e_jobs_per_s": 10}, {"e2e_jobs_per_s": 10}, {"e2e_jobs_per_s": 10}},
			ratios: []any{3.0, 1.0, 2.0}, median: 2.0,
		},
		{
			name: "the median of two is their mean", key: "peak_rss_mb",
			a:      []side{{"peak_rss_mb": 20}, {"peak_rss_mb": 30}},
			b:      []side{{"peak_rss_mb": 10}, {"peak_rss_mb": 10}},
			ratios: []any{2.0, 3.0}, median: 2.5,
		},
		{
			name: "a field one side lacks leaves that pair out", key: "live_peak_rss_mb",
			a:      []side{{"live_peak_rss_mb": 20}, {"live_peak_rss_mb": 30}, {"live_peak_rss_mb": 12}},
			b:      []side{{}, {"live_peak_rss_mb": 10}, {"live_peak_rss_mb": 10}},
			ratios: []any{nil, 3.0, 1.2}, median: 2.1,
		},
		{
			name: "a field no pair has gives no median", key: "retained_bytes_per_job",
			a:      []side{{"e2e_jobs_per_s": 1}},
			b:      []side{{"e2e_jobs_per_s": 1}},
			ratios: []any{nil}, median: nil,
		},
		{
			name: "a zero B gives no ratio", key: "enqueue_per_s",
			a:      []side{{"enqueue_per_s": 5}},
			b:      []side{{"enqueue_per_s": 0}},
			ratios: []any{nil}, median: nil,
		},
		{
			name: "live CPU is worker plus Redis", key: "live_cpu_us_per_job",
			a:      []side{{"live_worker_cpu_us_per_job": 30, "live_redis_cpu_us_per_job": 10}},
			b:      []side{{"live_worker_cpu_us_per_job": 15, "live_redis_cpu_us_per_job": 5}},
			ratios: []any{2.0}, median: 2.0,
		},
		{
			name: "live CPU with one part missing is missing", key: "live_cpu_us_per_job",
			a:      []side{{"live_worker_cpu_us_per_job": 30}},
			b:      []side{{"live_worker_cpu_us_per_job": 15, "live_redis_cpu_us_per_job": 5}},
			ratios: []any{nil}, median: nil,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var runs []run
			for i := range tc.a {
				for j, s := range []side{tc.a[i], tc.b[i]} {
					r, err := readRun(canned(t, string(rune('a'+j))+".json", s, nil, ""))
					must(t, err)
					runs = append(runs, r)
				}
			}
			rep, err := build("new", "old", "conveyor", runs)
			must(t, err)
			if rep.Pairs != len(tc.a) {
				t.Fatalf("pairs %d, want %d", rep.Pairs, len(tc.a))
			}
			row := rowOf(t, rep, tc.key)
			if got := show(vals(row.Ratio)); got != show(tc.ratios) {
				t.Errorf("ratios %s, want %s", got, show(tc.ratios))
			}
			if got, want := show([]any{val(row.Median)}), show([]any{tc.median}); got != want {
				t.Errorf("median %s, want %s", got, want)
			}
		})
	}
}

// show prints values to 9 decimals, so float noise does not fail a comparison; nil is "nil".
func show(xs []any) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = "nil"
		if f, ok := x.(float64); ok {
			parts[i] = strconv.FormatFloat(f, 'f', 9, 64)
		}
	}
	return strings.Join(parts, " ")
}

func val(x *float64) any {
	if x == nil {
		return nil
	}
	return *x
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestBuildRefusesHalfPairs(t *testing.T) {
	r, err := readRun(canned(t, "a.json", nil, nil, ""))
	must(t, err)
	for _, runs := range [][]run{nil, {r}, {r, r, r}} {
		if _, err := build("a", "b", "conveyor", runs); err == nil {
			t.Errorf("%d files: no error", len(runs))
		}
	}
}

// TestMarkdown reads files as ab.sh leaves them, with a failed workload on one side and a run of
// another size, and checks the table's row, the ratios to raw, and that both problems are told.
func TestMarkdown(t *testing.T) {
	a := canned(t, "a.json", map[string]float64{"e2e_jobs_per_s": 36612}, map[string]float64{"e2e_vs_raw": 0.15},
		`, "errors": ["e2e conveyor round 1: timeout"]`)
	b := canned(t, "b.json", map[string]float64{"e2e_jobs_per_s": 32600}, map[string]float64{"e2e_vs_raw": 0.12}, "")
	// B ran with another job count: the note must say so.
	raw, err := os.ReadFile(b)
	must(t, err)
	must(t, os.WriteFile(b, bytes.Replace(raw, []byte(`"jobs": 1000`), []byte(`"jobs": 2000`), 1), 0o600))

	var runs []run
	for _, f := range []string{a, b} {
		r, err := readRun(f)
		must(t, err)
		runs = append(runs, r)
	}
	rep, err := build("HEAD (abc1234)", "v0.9.0 (cc44d50)", "conveyor", runs)
	must(t, err)
	var out bytes.Buffer
	writeMarkdown(&out, rep)
	s := out.String()
	for _, want := range []string{
		"A = HEAD (abc1234), B = v0.9.0 (cc44d50)",
		"| e2e drain (jobs/s) | higher | 36,612 | 32,600 | 1.123 | 1.123 |",
		"| e2e / raw, same run | higher | 0.150 | 0.120 | 1.250 | 1.250 |",
		"| live (jobs/s) | higher | n/a | n/a | n/a | n/a |",
		"Load average as each run began (A1 B1 A2 B2 ...): 0.500, 0.500.",
		"- error: pair 1 A: e2e conveyor round 1: timeout",
		"- note: pair 1 ran unlike: A jobs=1000",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the report lacks %q:\n%s", want, s)
		}
	}
}

func TestReadRunRefusesBadJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.json")
	must(t, os.WriteFile(path, []byte("{"), 0o600))
	for _, f := range []string{path, filepath.Join(t.TempDir(), "missing.json")} {
		if _, err := readRun(f); err == nil {
			t.Errorf("%s: no error", f)
		}
	}
}
