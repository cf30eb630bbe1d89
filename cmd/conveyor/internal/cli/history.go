package cli

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/pipeline"
)

func init() { addCommand(newHistoryCmd) }

func newHistoryCmd(a *app) *cobra.Command {
	var queue, resolution string
	var window time.Duration
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:   "history [--queue Q | --all] [--resolution 5s|1m] [--window D] [--json]",
		Short: "Show a queue's recent throughput, queue wait and execution time",
		Long: `Show what a queue's workers finished recently, bucket by bucket: completed jobs, jobs that
went dead (sent to the dead set; "failed" in --json) and retried ones, and the 50th and 99th
percentiles of the queue wait (from publish, or from the promotion of a due or retried job, to
the handler's start) and of the execution time. The workers keep this history in Redis (5 s buckets for an hour, 1 min buckets
for a day), so it shows jobs that ran before anything was watching. Buckets without outcomes
are left out of the table; the last line sums the window. Percentiles are within 9%; "<1ms"
is under a millisecond. With --all, every queue together. With --json it prints one object
with every bucket, empty ones too.`,
		Example: `  conveyor history --queue emails
  conveyor history --queue emails --resolution 1m --window 6h
  conveyor history --all --json | jq .total`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if all && cmd.Flags().Changed("queue") {
				return usageErrorf("--all and --queue cannot be used together")
			}
			var step, span time.Duration
			switch resolution {
			case "5s":
				step, span = pipeline.HistoryStepFine, historySpanFine
			case "1m":
				step, span = pipeline.HistoryStepCoarse, historySpanCoarse
			default:
				return usageErrorf("--resolution %q: want 5s or 1m", resolution)
			}
			if window < 0 {
				return usageErrorf("--window %s is negative", window)
			}
			if window == 0 {
				window = 15 * time.Minute
				if step == pipeline.HistoryStepCoarse {
					window = span
				}
			}
			window = min(window, span)
			name := queue
			if all {
				name = ""
			} else if err := checkIDs(queue, nil); err != nil {
				return err
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if !all {
				if err := a.requireQueue(ctx, queue, nil); err != nil {
					return err
				}
			}
			h, err := insp.History(ctx, name, step, time.Now().Add(-window))
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, historyJSONOf(h, resolution, window))
			}
			what := "queue " + queue
			if all {
				what = "all queues"
			}
			if h.Total.Completed+h.Total.Failed+h.Total.Retried == 0 {
				fmt.Fprintf(a.stderr, "no jobs finished in %s in the last %s\n", what, window)
				return nil
			}
			return printHistory(a.stdout, h, what, window)
		},
	}
	cmd.Flags().StringVarP(&queue, "queue", "q", pipeline.DefaultQueue, "queue to show")
	cmd.Flags().BoolVar(&all, "all", false, "show every queue together")
	cmd.Flags().StringVar(&resolution, "resolution", "5s", "bucket length: 5s (kept an hour) or 1m (kept a day)")
	cmd.Flags().DurationVar(&window, "window", 0, "how far back (default 15m at 5s, 24h at 1m; at most what the resolution keeps)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printHistory writes one row per bucket with outcomes, then the window's total.
func printHistory(w io.Writer, h *pipeline.History, what string, window time.Duration) error {
	fmt.Fprintf(w, "%s, last %s in %s buckets (local time)\n", what, window, h.Step)
	t := newTable(w)
	fmt.Fprintln(t, "TIME\tCOMPLETED\tWENT_DEAD\tRETRIED\t|\tWAIT_P50\tWAIT_P99\tEXEC_P50\tEXEC_P99")
	row := func(label string, p pipeline.HistoryPoint) {
		fmt.Fprintf(t, "%s\t%d\t%d\t%d\t|\t%s\t%s\t%s\t%s\n", label, p.Completed, p.Failed, p.Retried,
			fmtLatency(p.Wait.P50, p.Wait.Count), fmtLatency(p.Wait.P99, p.Wait.Count),
			fmtLatency(p.Exec.P50, p.Exec.Count), fmtLatency(p.Exec.P99, p.Exec.Count))
	}
	for _, p := range h.Points {
		if p.Completed+p.Failed+p.Retried > 0 {
			row(p.At.Local().Format("15:04:05"), p)
		}
	}
	row("TOTAL", h.Total)
	return t.Flush()
}

// fmtLatency is a percentile as the table shows it: "-" without attempts, "<1ms" under a
// millisecond (the histogram's first cell), else two or three significant digits.
func fmtLatency(d time.Duration, n int64) string {
	switch {
	case n == 0:
		return "-"
	case d < time.Millisecond:
		return "<1ms"
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// historyJSON is the --json form: counts per bucket (not rates), percentiles in ms as the API's
// GET /v1/throughput gives them.
type historyJSON struct {
	Queue         string          `json:"queue,omitempty"`
	Resolution    string          `json:"resolution"`
	StepSeconds   float64         `json:"step_seconds"`
	WindowSeconds float64         `json:"window_seconds"`
	Points        []historyPointJ `json:"points"`
	Total         historyPointJ   `json:"total"`
}

type historyPointJ struct {
	T         int64   `json:"t"` // the bucket's start, unix ms; the window's start for total
	Completed int64   `json:"completed"`
	Failed    int64   `json:"failed"`
	Retried   int64   `json:"retried"`
	WaitP50   float64 `json:"wait_p50_ms,omitempty"`
	WaitP99   float64 `json:"wait_p99_ms,omitempty"`
	ExecP50   float64 `json:"exec_p50_ms,omitempty"`
	ExecP99   float64 `json:"exec_p99_ms,omitempty"`
}

func historyJSONOf(h *pipeline.History, resolution string, window time.Duration) historyJSON {
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Millisecond)*100) / 100 }
	point := func(p pipeline.HistoryPoint) historyPointJ {
		return historyPointJ{T: p.At.UnixMilli(), Completed: p.Completed, Failed: p.Failed, Retried: p.Retried,
			WaitP50: ms(p.Wait.P50), WaitP99: ms(p.Wait.P99), ExecP50: ms(p.Exec.P50), ExecP99: ms(p.Exec.P99)}
	}
	out := historyJSON{Queue: h.Queue, Resolution: resolution, StepSeconds: h.Step.Seconds(), WindowSeconds: window.Seconds(),
		Points: make([]historyPointJ, len(h.Points)), Total: point(h.Total)}
	for i, p := range h.Points {
		out.Points[i] = point(p)
	}
	return out
}
