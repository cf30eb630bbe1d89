package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/keyspace"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

func init() { addCommand(newStatsCmd) }

func newStatsCmd(a *app) *cobra.Command {
	var queue string
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:   "stats [--queue Q | --all] [--json]",
		Short: "Show a queue's gauges and counters",
		Long: `Show how many jobs of a queue are waiting, scheduled, queued, in progress and dead right now, and
how many were enqueued, completed, went dead (sent to the dead set) and retried since the queue
was created. With --json it prints one JSON object; with --all, every known queue (a JSON array).

The gauges (now):
  waiting           workflow tasks waiting for the tasks they run after
  scheduled         waiting for their time: a delay, a retry's backoff, a snooze; or for a
                    concurrency limit's slot (limit_waiting in --json)
  queued            waiting for a worker (group_waiting in --json: for a place in their group)
  in_progress       held by a worker
  dead              failed for good, kept in the dead set for a replay or a purge
The counters (since the queue was created; --json has them all):
  enqueued          jobs published
  completed         jobs that succeeded
  went_dead         jobs sent to the dead set, for any reason; "failed" is its JSON name, the
  (failed)          wire name of a dead job
  retried           failed attempts scheduled to run again (a retry is not a death)
  recovered         jobs taken back from a worker that stopped renewing its lease (crashed,
                    or lost Redis) and queued again
  dead_by_recovery  jobs whose worker was lost on their last attempt, so recovery sent them
                    to the dead set (also counted in failed)
  refused           late writes refused: a worker reported on a job that had moved on
                    (canceled, recovered, put back) and nothing changed; a steady count means
                    workers lose their leases (a visibility timeout shorter than the work?)
  canceled          jobs canceled or deleted before they finished
  released          jobs a worker put back unfinished as it shut down; not an attempt
  poison            stream entries that could not be read as a job, sent to the dead set
                    (also counted in failed)
  debounced         publishes that joined a pending debounced job instead of making one
  limited           times a flow-control limit made a job wait; not an attempt
--json also has waiting_for: the jobs that are not running counted by why they wait
({"due": 2, "no_worker_queue": 1, ...}, the reasons that have any; 'conveyor status ID' says
a job's own). The counts split the gauges without reading a job: a scheduled job counts as due
(no_worker_queue once due with no live worker reading the queue), a queued one as
no_worker_queue, paused, priority or ready, a group's waiting one as group_window.

Beside them, how long jobs wait for a worker:
  latency           the age of the oldest job ready to run (queued, not yet handed to a
                    worker), by Redis's clock; 0s when none waits. It grows when the workers
                    fall behind, stop, or the queue is paused. latency_ms in --json
  wait_p50          the 50th and 99th percentiles of the queue wait (publish, or the promotion
  wait_p99          of a due job, to the handler's start) of the jobs the workers started in
                    the last 15 minutes, from the history they keep ('conveyor history'); "-"
                    when none started. Not in --json: 'conveyor history --json' has them

A queue that is not known (nothing was ever published to it or read from it) is refused
(exit 1) with the names of the known queues.`,
		Example: `  conveyor stats
  conveyor stats --queue emails --json | jq .completed
  conveyor stats --all`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if all && cmd.Flags().Changed("queue") {
				return usageErrorf("--all and --queue cannot be used together")
			}
			if err := checkIDs(queue, nil); !all && err != nil {
				return err
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if !all {
				st, err := insp.Stats(ctx, queue)
				if err != nil {
					return err
				}
				if err := a.requireQueue(ctx, queue, st); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(a.stdout, st)
				}
				waits, err := waitsOf(ctx, insp, []*pipeline.QueueStats{st})
				if err != nil {
					return err
				}
				return printStats(a.stdout, []*pipeline.QueueStats{st}, waits)
			}
			return a.printQueues(ctx, insp, asJSON)
		},
	}
	cmd.Flags().StringVarP(&queue, "queue", "q", pipeline.DefaultQueue, "queue to show")
	cmd.Flags().BoolVar(&all, "all", false, "show every known queue")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// statsWaitWindow is how far back the table of stats reads each queue's queue wait.
const statsWaitWindow = 15 * time.Minute

// waitsOf reads each queue's queue wait (publish to handler start) over the last
// statsWaitWindow from the workers' history: one pipelined read a queue.
func waitsOf(ctx context.Context, insp *pipeline.Inspector, stats []*pipeline.QueueStats) (map[string]pipeline.Latency, error) {
	out := make(map[string]pipeline.Latency, len(stats))
	since := time.Now().Add(-statsWaitWindow)
	for _, s := range stats {
		h, err := insp.History(ctx, s.Queue, pipeline.HistoryStepFine, since)
		if err != nil {
			return nil, err
		}
		out[s.Queue] = h.Total.Wait
	}
	return out, nil
}

// fmtAge is a queue's latency as the table shows it: to the millisecond under a second, a
// tenth of a second under a minute, the second above.
func fmtAge(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return d.String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// printStats writes one table row per queue: the gauges, then the counters, then the latency
// and the queue wait of the last statsWaitWindow (waits, by queue).
func printStats(w io.Writer, stats []*pipeline.QueueStats, waits map[string]pipeline.Latency) error {
	t := newTable(w)
	// DEAD is the dead set now; WENT_DEAD counts the jobs that went there (the counter "failed"
	// in JSON): "dead" is the one word a person reads for a job that failed for good.
	fmt.Fprint(t, "QUEUE\t")
	for _, st := range status.All() {
		if _, ok := (&pipeline.QueueStats{}).Gauge(st); ok {
			fmt.Fprint(t, strings.ToUpper(st.Word())+"\t")
		}
	}
	fmt.Fprint(t, "|\tENQUEUED\tCOMPLETED\tWENT_DEAD\tRETRIED\tRECOVERED\tCANCELED\tREJECTED_FULL\tDROPPED_FULL\t")
	fmt.Fprintln(t, "|\tLATENCY\tWAIT_P50\tWAIT_P99")
	for _, s := range stats {
		name := s.Queue
		if s.Paused { // conveyor pause: workers do not read it
			name += " (paused)"
		}
		fmt.Fprint(t, name+"\t")
		for _, st := range status.All() {
			if n, ok := s.Gauge(st); ok {
				fmt.Fprintf(t, "%d\t", n)
			}
		}
		fmt.Fprintf(t, "|\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t",
			s.Enqueued, s.Completed, s.Failed, s.Retried, s.Recovered, s.Canceled, s.RejectedFull, s.DroppedFull)
		wait := waits[s.Queue]
		fmt.Fprintf(t, "|\t%s\t%s\t%s\n", fmtAge(s.LatencyMS), fmtLatency(wait.P50, wait.Count), fmtLatency(wait.P99, wait.Count))
	}
	return t.Flush()
}

// printQueues prints every known queue's stats: a table, or with asJSON a JSON array.
func (a *app) printQueues(ctx context.Context, insp *pipeline.Inspector, asJSON bool) error {
	stats, err := insp.Queues(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(a.stdout, stats)
	}
	if len(stats) == 0 {
		_, err := fmt.Fprintln(a.stdout, "no queues yet")
		return err
	}
	waits, err := waitsOf(ctx, insp, stats)
	if err != nil {
		return err
	}
	return printStats(a.stdout, stats, waits)
}

// requireQueue refuses a queue that does not exist, naming the known queues. A queue exists
// when it is known or has something to show (pipeline.Inspector.QueueExists). Without this
// check a typo shows a queue of zeros. st
// is the queue's stats when the caller has read them (a queue with any is there), or nil.
func (a *app) requireQueue(ctx context.Context, queue string, st *pipeline.QueueStats) error {
	if st != nil && !st.Empty() {
		return nil
	}
	insp, err := a.inspector()
	if err != nil {
		return err
	}
	exists, err := insp.QueueExists(ctx, queue)
	if err != nil || exists {
		return err
	}
	names, err := insp.QueueNames(ctx)
	if err != nil {
		return err
	}
	return queueNotFound(queue, a.prefix, names)
}

// queueNotFound is the error for a queue that does not exist, listing the known ones (at most
// maxNamed of them).
func queueNotFound(queue, prefix string, known []string) error {
	if len(known) == 0 {
		return fmt.Errorf("queue %q not found: there are no queues under prefix %q yet (publishing a job or starting a worker makes one)", queue, prefix)
	}
	const maxNamed = 20
	slices.Sort(known)
	named := strings.Join(known[:min(len(known), maxNamed)], ", ")
	if len(known) > maxNamed {
		named += fmt.Sprintf(" and %d more", len(known)-maxNamed)
	}
	return fmt.Errorf("queue %q not found; known queues: %s (see 'conveyor queues')", queue, named)
}

// checkIDs refuses a malformed queue name or job id before anything is changed.
func checkIDs(queue string, ids []string) error {
	errs := []error{keyspace.ValidateQueue(queue)}
	for _, id := range ids {
		errs = append(errs, keyspace.ValidateID(id))
	}
	if err := errors.Join(errs...); err != nil {
		return usageError{err}
	}
	return nil
}
