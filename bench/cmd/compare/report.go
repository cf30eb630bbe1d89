package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// report is what the command prints: as JSON with -json, else as markdown tables.
type report struct {
	Machine machineFacts              `json:"machine"`
	Config  map[string]any            `json:"config"`
	Systems map[string]map[string]any `json:"systems"`
	// Ratios are paired: for each round, conveyor's value over the other system's value in
	// the same round (the runs are seconds apart), then the median over rounds.
	Ratios map[string]float64 `json:"ratios"`
	// RatiosPerRound are the paired ratios of each round, in round order.
	RatiosPerRound map[string][]float64 `json:"ratios_per_round"`
	// RatiosOfMedians divide the medians instead, as a cross-check; on a VM whose speed
	// drifts between minutes they scatter more than the paired ones.
	RatiosOfMedians map[string]float64 `json:"ratios_of_medians"`
	Targets         []target           `json:"targets"`
	Errors          []string           `json:"errors"`
	Warnings        []string           `json:"warnings"`

	medians  map[string]map[string]float64 // system or variant -> metric -> median
	families []string
	variants map[string][]string
	rounds   int
}

type target struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Op    string  `json:"op"`
	Bound float64 `json:"bound"`
	Pass  bool    `json:"pass"`
}

// metricRows are the table's rows, in order: key, label.
var metricRows = [][2]string{
	{"e2e_jobs_per_s", "e2e: drain N published jobs (jobs/s)"},
	{"live_jobs_per_s", "live: publish and consume at once (jobs/s)"},
	{"enqueue_per_s", "single enqueue, 1 goroutine (jobs/s)"},
	{"enqueue_batch_per_s", "batch enqueue, chunks of 1000 (jobs/s)"},
	{"preload_per_s", "e2e preload, fastest publish (jobs/s)"},
	{"live_publish_per_s", "live: publish rate (jobs/s)"},
	{"delayed_lateness_p50_ms", "delayed 1s: lateness p50 (ms)"},
	{"delayed_lateness_p99_ms", "delayed 1s: lateness p99 (ms)"},
	{"delayed_lateness_max_ms", "delayed 1s: lateness max (ms)"},
	{"delayed_lateness_min_ms", "delayed 1s: lateness min (ms)"},
	{"delayed_early", "delayed 1s: jobs started early (count)"},
	{"peak_rss_mb", "worker peak RSS, e2e (MiB)"},
	{"live_peak_rss_mb", "worker peak RSS, live (MiB)"},
	{"worker_cpu_us_per_job", "worker CPU per job, e2e drain (us)"},
	{"worker_cpu_us_per_job_stat", "  same from /proc/pid/stat, 10 ms ticks (us)"},
	{"redis_cpu_us_per_job", "Redis CPU per job, e2e drain (us)"},
	{"cpu_us_per_job", "worker + Redis CPU per job, e2e drain (us)"},
	{"live_worker_cpu_us_per_job", "worker CPU per job, live (us)"},
	{"live_redis_cpu_us_per_job", "Redis CPU per job, live incl. publish (us)"},
	{"enqueue_redis_cpu_us_per_job", "Redis CPU per job, e2e preload (us)"},
	{"enqueue_one_redis_cpu_us_per_job", "Redis CPU per job, single enqueue (us)"},
	{"redis_bytes_per_job", "Redis memory per queued job (bytes)"},
	{"retained_bytes_per_job", "Redis memory per job after drain (bytes)"},
	{"e2e_extra_deliveries", "extra handler calls, e2e (count)"},
	{"live_extra_deliveries", "extra handler calls, live (count)"},
}

// higherIsBetter tells the direction of a metric when a family's best variant is chosen.
func higherIsBetter(metric string) bool { return strings.HasSuffix(metric, "_per_s") }

// better tells whether x beats cur for metric, in the metric's direction.
func better(metric string, x, cur float64) bool {
	if higherIsBetter(metric) {
		return x > cur
	}
	return x < cur
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

func buildReport(o options, machine machineFacts, res *results) *report {
	rep := &report{
		Machine: machine,
		Config: map[string]any{
			"jobs": o.jobs, "rounds": o.rounds, "payload_bytes": o.payloadBytes, "systems": o.systems,
			"conveyor_concurrency": o.convConc, "conveyor_batch": o.convBatch,
			"asynq_concurrency": o.asynqConc, "watermill_subs": o.watermillSubs,
			"delayed_jobs": delayedCount(o.jobs), "delayed_delay_ms": delayedDelay.Milliseconds(),
			"timeout": o.timeout.String(),
		},
		Systems: map[string]map[string]any{},
		Ratios:  map[string]float64{},

		RatiosPerRound:  map[string][]float64{},
		RatiosOfMedians: map[string]float64{},
		Targets:         []target{},
		Errors:          append([]string{}, res.errs...),
		Warnings:        append([]string{}, res.warnings...),
		medians:         map[string]map[string]float64{},
		families:        o.systems,
		rounds:          o.rounds,
		variants:        variantsOf(o),
	}
	// Variants: medians over rounds.
	for v, ms := range res.vals {
		med := map[string]float64{}
		obj := map[string]any{}
		perRound := map[string][]float64{}
		for k, byRound := range ms {
			xs := inRounds(byRound)
			med[k] = median(xs)
			obj[k] = round3(med[k])
			rs := make([]float64, len(xs))
			for i, x := range xs {
				rs[i] = round3(x)
			}
			perRound[k] = rs
		}
		if early := ms["delayed_early"]; len(early) > 0 {
			total := 0.0
			for _, x := range early {
				total += x
			}
			obj["delayed_early_total"] = total
			med["delayed_early_total"] = total
		}
		obj["per_round"] = perRound
		for k, val := range res.info[v] {
			obj[k] = val
		}
		rep.medians[v] = med
		rep.Systems[v] = obj
	}
	// Families: the variant itself, or each metric's best variant.
	for _, fam := range o.systems {
		vs := rep.variants[fam]
		if len(vs) == 1 {
			if obj, ok := rep.Systems[vs[0]]; ok {
				rep.Systems[fam] = obj
				rep.medians[fam] = rep.medians[vs[0]]
			}
			continue
		}
		med := map[string]float64{}
		bestOf := map[string]string{}
		for _, v := range vs {
			for k, x := range rep.medians[v] {
				cur, seen := med[k]
				if !seen || better(k, x, cur) {
					med[k], bestOf[k] = x, v
				}
			}
		}
		if len(med) == 0 {
			continue
		}
		obj := map[string]any{"best_of": bestOf, "variants": vs}
		for k, x := range med {
			obj[k] = round3(x)
		}
		rep.Systems[fam] = obj
		rep.medians[fam] = med
	}
	rep.ratiosAndTargets(res)
	rep.addOpenloop(o)
	return rep
}

// perRound is a system's value of metric in each round: a family with several variants takes
// its best variant of that round.
func (rep *report) perRound(res *results, sys, metric string) map[int]float64 {
	vs := rep.variants[sys]
	if len(vs) == 0 {
		vs = []string{sys}
	}
	out := map[int]float64{}
	for _, v := range vs {
		for round, x := range res.vals[v][metric] {
			cur, seen := out[round]
			if !seen || better(metric, x, cur) {
				out[round] = x
			}
		}
	}
	return out
}

func (rep *report) get(sys, metric string) (float64, bool) {
	x, ok := rep.medians[sys][metric]
	return x, ok && !math.IsNaN(x)
}

func (rep *report) ratiosAndTargets(res *results) {
	ratio := func(name, a, am, b, bm string) {
		x, ok1 := rep.get(a, am)
		y, ok2 := rep.get(b, bm)
		if ok1 && ok2 && y > 0 {
			rep.RatiosOfMedians[name] = round3(x / y)
		}
		xs, ys := rep.perRound(res, a, am), rep.perRound(res, b, bm)
		var rs []float64
		for round := 1; round <= rep.rounds; round++ {
			x, ok1 := xs[round]
			y, ok2 := ys[round]
			if ok1 && ok2 && y > 0 && !math.IsNaN(x) && !math.IsNaN(y) {
				rs = append(rs, round3(x/y))
			}
		}
		if len(rs) > 0 {
			rep.RatiosPerRound[name] = rs
			rep.Ratios[name] = round3(median(rs))
		}
	}
	ratio("e2e_vs_asynq", "conveyor", "e2e_jobs_per_s", "asynq", "e2e_jobs_per_s")
	ratio("live_vs_asynq", "conveyor", "live_jobs_per_s", "asynq", "live_jobs_per_s")
	ratio("e2e_vs_raw", "conveyor", "e2e_jobs_per_s", "raw", "e2e_jobs_per_s")
	ratio("live_vs_raw", "conveyor", "live_jobs_per_s", "raw", "live_jobs_per_s")
	ratio("e2e_vs_watermill", "conveyor", "e2e_jobs_per_s", "watermill", "e2e_jobs_per_s")
	ratio("live_vs_watermill", "conveyor", "live_jobs_per_s", "watermill", "live_jobs_per_s")
	ratio("enqueue_vs_asynq", "conveyor", "enqueue_per_s", "asynq", "enqueue_per_s")
	ratio("enqueue_batch_vs_asynq_enqueue", "conveyor", "enqueue_batch_per_s", "asynq", "enqueue_per_s")
	ratio("enqueue_batch_vs_raw", "conveyor", "enqueue_batch_per_s", "raw", "enqueue_batch_per_s")
	ratio("peak_rss_vs_asynq", "conveyor", "peak_rss_mb", "asynq", "peak_rss_mb")
	ratio("redis_bytes_vs_asynq", "conveyor", "redis_bytes_per_job", "asynq", "redis_bytes_per_job")
	ratio("cpu_per_job_vs_asynq", "conveyor", "cpu_us_per_job", "asynq", "cpu_us_per_job")
	ratio("delayed_p99_vs_asynq", "conveyor", "delayed_lateness_p99_ms", "asynq", "delayed_lateness_p99_ms")
	// With -systems conveyor,conveyor_metrics: the cost of the metrics.
	ratio("e2e_metrics_vs_bare", "conveyor_metrics", "e2e_jobs_per_s", "conveyor", "e2e_jobs_per_s")
	ratio("live_metrics_vs_bare", "conveyor_metrics", "live_jobs_per_s", "conveyor", "live_jobs_per_s")
	ratio("cpu_per_job_metrics_vs_bare", "conveyor_metrics", "cpu_us_per_job", "conveyor", "cpu_us_per_job")
	// With conveyor_bounded and conveyor_keys: a bound set and never reached, and encryption.
	ratio("e2e_bounded_vs_bare", "conveyor_bounded", "e2e_jobs_per_s", "conveyor", "e2e_jobs_per_s")
	ratio("live_bounded_vs_bare", "conveyor_bounded", "live_jobs_per_s", "conveyor", "live_jobs_per_s")
	ratio("enqueue_bounded_vs_bare", "conveyor_bounded", "enqueue_per_s", "conveyor", "enqueue_per_s")
	ratio("enqueue_batch_bounded_vs_bare", "conveyor_bounded", "enqueue_batch_per_s", "conveyor", "enqueue_batch_per_s")
	ratio("cpu_per_job_bounded_vs_bare", "conveyor_bounded", "cpu_us_per_job", "conveyor", "cpu_us_per_job")
	ratio("e2e_keys_vs_bare", "conveyor_keys", "e2e_jobs_per_s", "conveyor", "e2e_jobs_per_s")
	ratio("live_keys_vs_bare", "conveyor_keys", "live_jobs_per_s", "conveyor", "live_jobs_per_s")
	ratio("cpu_per_job_keys_vs_bare", "conveyor_keys", "cpu_us_per_job", "conveyor", "cpu_us_per_job")

	check := func(name string, x float64, ok bool, op string, bound float64) {
		if !ok {
			return
		}
		pass := x >= bound
		if op == "<=" {
			pass = x <= bound
		}
		rep.Targets = append(rep.Targets, target{Name: name, Value: round3(x), Op: op, Bound: bound, Pass: pass})
	}
	r := func(name string) (float64, bool) { x, ok := rep.Ratios[name]; return x, ok }
	x, ok := r("e2e_vs_asynq")
	check("e2e_vs_asynq", x, ok, ">=", 5)
	x, ok = r("e2e_vs_raw")
	check("e2e_vs_raw", x, ok, ">=", 0.15)
	x, ok = r("live_vs_asynq")
	check("live_vs_asynq", x, ok, ">=", 5)
	x, ok = r("enqueue_batch_vs_asynq_enqueue")
	check("enqueue_batch_vs_asynq_enqueue", x, ok, ">=", 10)
	x, ok = r("enqueue_vs_asynq")
	check("enqueue_vs_asynq", x, ok, ">=", 1)
	x, ok = rep.get("conveyor", "delayed_lateness_p99_ms")
	check("conveyor delayed_lateness_p99_ms", x, ok, "<=", 10)
	x, ok = rep.get("conveyor", "delayed_early_total")
	check("conveyor delayed_early_total (all rounds)", x, ok, "<=", 0)
	x, ok = r("peak_rss_vs_asynq")
	check("peak_rss_vs_asynq", x, ok, "<=", 1)
	x, ok = r("redis_bytes_vs_asynq")
	check("redis_bytes_vs_asynq", x, ok, "<=", 1)
	x, ok = r("cpu_per_job_vs_asynq")
	check("cpu_per_job_vs_asynq", x, ok, "<=", 0.2)
	if left, ok := res.info["conveyor"]["leftover"].(map[string]int64); ok {
		check("conveyor leftover stream_len", float64(left["stream_len"]), true, "<=", 0)
		check("conveyor leftover job_hashes_without_ttl", float64(left["job_hashes_without_ttl"]), true, "<=", 0)
	}
}

func writeJSON(w io.Writer, rep *report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func fmtNum(x float64, ok bool) string {
	if !ok {
		return "–"
	}
	a := math.Abs(x)
	switch {
	case a >= 1000:
		s := fmt.Sprintf("%.0f", math.Abs(x))
		var b strings.Builder
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		if x < 0 {
			return "-" + b.String()
		}
		return b.String()
	case a >= 100:
		return fmt.Sprintf("%.0f", x)
	case a >= 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
}

func writeMarkdown(w io.Writer, rep *report) {
	m := rep.Machine
	fmt.Fprintf(w, "## Machine\n\n- nproc: %d, %s, redis-server %s", m.NProc, m.GoVersion, m.RedisVersion)
	if m.CPUModel != "" {
		fmt.Fprintf(w, ", CPU: %s", m.CPUModel)
	}
	if m.Kernel != "" {
		fmt.Fprintf(w, ", Linux %s", m.Kernel)
	}
	fmt.Fprintf(w, "\n- consumer child baseline peak RSS (idle, same binary): %.1f MiB; 1-min load average %.2f at start, %.2f at end", m.ChildBaselineRSSMB, m.LoadAvgStart, m.LoadAvgEnd)
	c := rep.Config
	fmt.Fprintf(w, "\n- jobs N=%v, rounds=%v (medians), payload %v B, conveyor concurrency %v / read batch %v, asynq concurrency %v, watermill subscriptions %v, delayed M=%v\n\n",
		c["jobs"], c["rounds"], c["payload_bytes"], c["conveyor_concurrency"], c["conveyor_batch"], c["asynq_concurrency"], c["watermill_subs"], c["delayed_jobs"])

	table := func(title string, cols []string) {
		var present []string
		for _, s := range cols {
			if _, ok := rep.medians[s]; ok {
				present = append(present, s)
			}
		}
		if len(present) == 0 {
			return
		}
		var lines []string
		for _, row := range metricRows {
			any := false
			var cells []string
			for _, s := range present {
				x, ok := rep.get(s, row[0])
				any = any || ok
				cells = append(cells, fmtNum(x, ok))
			}
			if any {
				lines = append(lines, fmt.Sprintf("| %s | %s |\n", row[1], strings.Join(cells, " | ")))
			}
		}
		if len(lines) == 0 { // a run of other workloads (-workloads openloop) has no row here
			return
		}
		fmt.Fprintf(w, "## %s\n\n| metric | %s |\n|---|%s\n%s\n", title, strings.Join(present, " | "), strings.Repeat("---:|", len(present)), strings.Join(lines, ""))
	}
	table("Results (medians; asynq and watermill: best variant per metric)", rep.families)
	var vcols []string
	for _, f := range rep.families {
		if len(rep.variants[f]) > 1 {
			vcols = append(vcols, rep.variants[f]...)
		}
	}
	table("Variants", vcols)

	writeOpenloop(w, rep)
	if len(rep.Ratios) > 0 {
		fmt.Fprintf(w, "## Ratios (conveyor / other)\n\nPaired: each round's ratio of two runs seconds apart, then the median over rounds. The ratio of the medians is the cross-check.\n\n| ratio | paired median | per round | ratio of medians |\n|---|---:|---|---:|\n")
		names := make([]string, 0, len(rep.Ratios))
		for k := range rep.Ratios {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			var per []string
			for _, x := range rep.RatiosPerRound[k] {
				per = append(per, fmtNum(x, true))
			}
			om, ok := rep.RatiosOfMedians[k]
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", k, fmtNum(rep.Ratios[k], true), strings.Join(per, ", "), fmtNum(om, ok))
		}
		fmt.Fprintln(w)
	}
	if len(rep.Targets) > 0 {
		fmt.Fprintf(w, "## Targets (issue)\n\n| target | value | bound | pass |\n|---|---:|---|---|\n")
		for _, t := range rep.Targets {
			pass := "yes"
			if !t.Pass {
				pass = "**no**"
			}
			fmt.Fprintf(w, "| %s | %s | %s %s | %s |\n", t.Name, fmtNum(t.Value, true), t.Op, fmtNum(t.Bound, true), pass)
		}
		fmt.Fprintln(w)
	}
	if obj, ok := rep.Systems["conveyor"]; ok {
		if left, ok := obj["leftover"].(map[string]int64); ok {
			keys := make([]string, 0, len(left))
			for k := range left {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			var parts []string
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%s=%d", k, left[k]))
			}
			fmt.Fprintf(w, "## Conveyor after the last e2e drain\n\n%s\n\n", strings.Join(parts, ", "))
		}
	}
	if len(rep.Warnings) > 0 {
		fmt.Fprintf(w, "## Warnings\n\n")
		for _, e := range rep.Warnings {
			fmt.Fprintf(w, "- %s\n", e)
		}
		fmt.Fprintln(w)
	}
	if len(rep.Errors) > 0 {
		fmt.Fprintf(w, "## Errors\n\n")
		for _, e := range rep.Errors {
			fmt.Fprintf(w, "- %s\n", strings.ReplaceAll(e, "\n", "\n  "))
		}
		fmt.Fprintln(w)
	}
}
