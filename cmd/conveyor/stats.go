package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/pipeline"
)

func init() { addCommand(newStatsCmd) }

func newStatsCmd(a *app) *cobra.Command {
	var queue string
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:   "stats [--queue Q | --all] [--json]",
		Short: "Show a queue's gauges and counters",
		Long: `Show how many jobs of a queue are scheduled, queued, in progress and dead right now, and
how many were enqueued, completed, failed (sent to the dead set) and retried since the queue was
created. With --json it prints one JSON object; with --all, every known queue (a JSON array).`,
		Example: `  conveyor stats
  conveyor stats --queue emails --json | jq .completed
  conveyor stats --all`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if all && cmd.Flags().Changed("queue") {
				return usageErrorf("--all and --queue cannot be used together")
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
				if asJSON {
					return writeJSON(a.stdout, st)
				}
				return printStats(a.stdout, []*pipeline.QueueStats{st})
			}
			return a.printQueues(ctx, insp, asJSON)
		},
	}
	cmd.Flags().StringVarP(&queue, "queue", "q", pipeline.DefaultQueue, "queue to show")
	cmd.Flags().BoolVar(&all, "all", false, "show every known queue")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printStats writes one table row per queue: the gauges, then the counters.
func printStats(w io.Writer, stats []*pipeline.QueueStats) error {
	t := newTable(w)
	fmt.Fprintln(t, "QUEUE\tSCHEDULED\tQUEUED\tIN_PROGRESS\tDEAD\t|\tENQUEUED\tCOMPLETED\tFAILED\tRETRIED\tRECOVERED\tCANCELED")
	for _, s := range stats {
		fmt.Fprintf(t, "%s\t%d\t%d\t%d\t%d\t|\t%d\t%d\t%d\t%d\t%d\t%d\n", s.Queue,
			s.Scheduled, s.Queued, s.InProgress, s.Dead,
			s.Enqueued, s.Completed, s.Failed, s.Retried, s.Recovered, s.Canceled)
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
	return printStats(a.stdout, stats)
}
