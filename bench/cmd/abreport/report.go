package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// metric is one row of the report: where its value sits in a compare JSON, and which way is
// better (so a reader need not remember whether a ratio above 1 is a gain).
type metric struct {
	Key    string
	Label  string
	Better string // "higher" or "lower"
	// Path is the value's place below the document's root; Sum adds several such values (a
	// total compare does not print), and the row is missing when any of them is.
	Path [][]string
}

// sys is where a system's figures sit; the report's metrics are Conveyor's unless -system says
// otherwise.
func sys(system, key string) []string { return []string{"systems", system, key} }

// metrics lists the rows, in the order the tables use.
func metrics(system string) []metric {
	one := func(key, label, better string) metric {
		return metric{Key: key, Label: label, Better: better, Path: [][]string{sys(system, key)}}
	}
	ratio := func(key, label string) metric {
		return metric{Key: key, Label: label, Better: "higher", Path: [][]string{{"ratios", key}}}
	}
	return []metric{
		one("e2e_jobs_per_s", "e2e drain (jobs/s)", "higher"),
		one("live_jobs_per_s", "live (jobs/s)", "higher"),
		one("enqueue_batch_per_s", "batch enqueue (jobs/s)", "higher"),
		one("enqueue_per_s", "single enqueue (jobs/s)", "higher"),
		one("worker_cpu_us_per_job", "worker CPU per job, e2e (us)", "lower"),
		one("live_worker_cpu_us_per_job", "worker CPU per job, live (us)", "lower"),
		one("redis_cpu_us_per_job", "Redis CPU per job, e2e (us)", "lower"),
		one("live_redis_cpu_us_per_job", "Redis CPU per job, live (us)", "lower"),
		one("cpu_us_per_job", "worker + Redis CPU per job, e2e (us)", "lower"),
		{Key: "live_cpu_us_per_job", Label: "worker + Redis CPU per job, live (us)", Better: "lower",
			Path: [][]string{sys(system, "live_worker_cpu_us_per_job"), sys(system, "live_redis_cpu_us_per_job")}},
		one("peak_rss_mb", "worker peak RSS, e2e (MiB)", "lower"),
		one("live_peak_rss_mb", "worker peak RSS, live (MiB)", "lower"),
		one("redis_bytes_per_job", "Redis memory per queued job (bytes)", "lower"),
		one("retained_bytes_per_job", "Redis memory per job after drain (bytes)", "lower"),
		ratio("e2e_vs_raw", "e2e / raw, same run"),
		ratio("live_vs_raw", "live / raw, same run"),
		ratio("enqueue_batch_vs_raw", "batch enqueue / raw, same run"),
	}
}

// run is one compare JSON file, decoded loosely: the fields differ between the refs compared.
type run struct {
	File string
	Doc  map[string]any
}

// value reads m's value in r; false when a field is missing or not a number.
func (r run) value(m metric) (float64, bool) {
	sum := 0.0
	for _, path := range m.Path {
		var cur any = r.Doc
		for _, k := range path {
			obj, ok := cur.(map[string]any)
			if !ok {
				return 0, false
			}
			cur = obj[k]
		}
		x, ok := cur.(float64)
		if !ok {
			return 0, false
		}
		sum += x
	}
	return sum, true
}

// problems are the compare run's own errors (a workload that failed or timed out), as strings.
func (r run) problems() []string {
	list, _ := r.Doc["errors"].([]any)
	var out []string
	for _, e := range list {
		out = append(out, fmt.Sprint(e))
	}
	return out
}

// load is the machine's load average as the run began: how quiet the machine was.
func (r run) load() (float64, bool) {
	return r.value(metric{Path: [][]string{{"machine", "loadavg_start"}}})
}

// config is the run's size, to tell the reader when the two sides were not run alike.
func (r run) config() string {
	c, _ := r.Doc["config"].(map[string]any)
	return fmt.Sprintf("jobs=%v rounds=%v systems=%v", c["jobs"], c["rounds"], c["systems"])
}

func readRun(file string) (run, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return run{}, err
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return run{}, fmt.Errorf("%s: %w", file, err)
	}
	return run{File: file, Doc: doc}, nil
}

// Row is one metric over all pairs. A nil entry is a value a file lacks (an older compare, a
// failed workload), or a ratio with such a side or a zero B.
type Row struct {
	Key    string     `json:"key"`
	Label  string     `json:"label"`
	Better string     `json:"better"`
	A      []*float64 `json:"a"`
	B      []*float64 `json:"b"`
	Ratio  []*float64 `json:"ratio"`
	Median *float64   `json:"median"`
}

// Report is the whole A/B comparison, as -json prints it.
type Report struct {
	A     string   `json:"a"`
	B     string   `json:"b"`
	Pairs int      `json:"pairs"`
	Files []string `json:"files"`
	Rows  []Row    `json:"rows"`
	// Load is each run's load average at its start, in run order (A1 B1 A2 B2 ...).
	Load   []*float64 `json:"load_start"`
	Errors []string   `json:"errors,omitempty"`
	Notes  []string   `json:"notes,omitempty"`
}

// build pairs the runs in the order they ran (A1 B1 A2 B2 ...) and takes each pair's A/B.
func build(labelA, labelB, system string, runs []run) (Report, error) {
	if len(runs) == 0 || len(runs)%2 != 0 {
		return Report{}, fmt.Errorf("want the files of whole pairs, A1 B1 A2 B2 ...; got %d", len(runs))
	}
	rep := Report{A: labelA, B: labelB, Pairs: len(runs) / 2}
	for i, r := range runs {
		rep.Files = append(rep.Files, r.File)
		rep.Load = append(rep.Load, ptr(r.load()))
		side := "A"
		if i%2 == 1 {
			side = "B"
		}
		for _, p := range r.problems() {
			rep.Errors = append(rep.Errors, fmt.Sprintf("pair %d %s: %s", i/2+1, side, p))
		}
		if i%2 == 1 && r.config() != runs[i-1].config() {
			rep.Notes = append(rep.Notes, fmt.Sprintf("pair %d ran unlike: A %s, B %s", i/2+1, runs[i-1].config(), r.config()))
		}
	}
	for _, m := range metrics(system) {
		row := Row{Key: m.Key, Label: m.Label, Better: m.Better}
		var ratios []float64
		for i := 0; i < len(runs); i += 2 {
			a, okA := runs[i].value(m)
			b, okB := runs[i+1].value(m)
			row.A = append(row.A, ptr(a, okA))
			row.B = append(row.B, ptr(b, okB))
			ok := okA && okB && b != 0
			row.Ratio = append(row.Ratio, ptr(a/b, ok))
			if ok {
				ratios = append(ratios, a/b)
			}
		}
		if len(ratios) > 0 {
			m := median(ratios)
			row.Median = &m
		}
		rep.Rows = append(rep.Rows, row)
	}
	return rep, nil
}

func ptr(x float64, ok bool) *float64 {
	if !ok {
		return nil
	}
	return &x
}

// median of a non-empty list; the mean of the middle two for an even count.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// writeMarkdown prints the report as the table docs/BENCHMARKS.md takes.
func writeMarkdown(w io.Writer, rep Report) {
	fmt.Fprintf(w, "## A/B: A = %s, B = %s\n\n", rep.A, rep.B)
	fmt.Fprintf(w, "%d pair(s), run A B A B ...; a value is compare's median over its rounds; "+
		"A/B per pair, then the median of those ratios. \"better\" says which way A gains.\n\n", rep.Pairs)
	fmt.Fprintln(w, "| metric | better | A | B | A/B per pair | A/B median |")
	fmt.Fprintln(w, "|---|---|---|---|---|---:|")
	for _, r := range rep.Rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", r.Label, r.Better,
			list(r.A, num), list(r.B, num), list(r.Ratio, ratio), one(r.Median, ratio))
	}
	fmt.Fprintf(w, "\nLoad average as each run began (A1 B1 A2 B2 ...): %s.\n", list(rep.Load, ratio))
	if len(rep.Notes) > 0 || len(rep.Errors) > 0 {
		fmt.Fprintln(w)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "- note: %s\n", n)
	}
	for _, e := range rep.Errors {
		fmt.Fprintf(w, "- error: %s\n", e)
	}
}

func list(xs []*float64, f func(float64) string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = one(x, f)
	}
	return strings.Join(parts, ", ")
}

func one(x *float64, f func(float64) string) string {
	if x == nil {
		return "n/a"
	}
	return f(*x)
}

func ratio(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }

// num prints a figure with as many digits as a 2-core VM's spread makes worth reading.
func num(x float64) string {
	switch a := math.Abs(x); {
	case a >= 1000:
		return thousands(int64(math.Round(x)))
	case a >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	default:
		return strconv.FormatFloat(x, 'f', 3, 64)
	}
}

func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
