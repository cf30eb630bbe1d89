package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/pipeline"
)

func init() { addCommand(newQueuesCmd) }

func newQueuesCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "queues [--json]",
		Short: "List every known queue with its gauges and counters",
		Long: `List every known queue (every queue something was published to or a worker read) with how
many of its jobs are scheduled, queued, in progress and dead right now, and its main counters.
With --json it prints what 'stats --all --json' prints: a JSON array of objects.`,
		Example: `  conveyor queues
  conveyor queues --json | jq -r '.[] | select(.dead > 0) | .queue'
  conveyor queues delete old-emails`,
		Args: unknownSubcommand,
		RunE: func(cmd *cobra.Command, _ []string) error {
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			return a.printQueues(cmd.Context(), insp, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	cmd.AddCommand(newQueuesDeleteCmd(a))
	return cmd
}

func newQueuesDeleteCmd(a *app) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "delete QUEUE [--force]",
		Short: "Delete a queue with all its jobs, dead jobs, records and counters",
		Long: `Delete every key of a queue (its stream, scheduled and dead sets, job records, counters and
unique keys) and remove it from the known queues. While the queue has unfinished jobs
(scheduled, queued, or held by a worker) it refuses, exits 1 and says how many; --force deletes
them too. Stop the queue's producers and workers first: a worker still running recreates the
stream it reads, and a job published meanwhile may be lost half-written.`,
		Example: `  conveyor queues delete old-emails
  conveyor queues delete old-emails --force`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("want exactly one queue name, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			queue := args[0]
			err = insp.DeleteQueue(cmd.Context(), queue, force)
			switch {
			case errors.Is(err, pipeline.ErrQueueBusy):
				return fmt.Errorf("%w; let it drain, or delete them too with --force", err)
			case errors.Is(err, pipeline.ErrQueueNotFound):
				return fmt.Errorf("queue %q not found (see 'conveyor queues')", queue)
			case err != nil:
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "deleted queue %s\n", queue)
			return err
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "delete the queue even while it has unfinished jobs")
	return cmd
}
