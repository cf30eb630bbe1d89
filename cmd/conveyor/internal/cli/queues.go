package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

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
  conveyor queues create emails --partitions 3
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
	cmd.AddCommand(newQueuesCreateCmd(a), newQueuesDeleteCmd(a), newQueuesSetCmd(a))
	return cmd
}

func newQueuesCreateCmd(a *app) *cobra.Command {
	var partitions int
	var drain time.Duration
	cmd := &cobra.Command{
		Use:   "create QUEUE [--partitions P] [--drain D]",
		Short: "Create a queue, or set its partition count",
		Long: `Create a queue (add it to the known queues) and store its partition count in Redis, where every
producer, worker and inspector reads it. A queue of P > 1 partitions is P key spaces,
{QUEUE#0.s} ... {QUEUE#P-1.s}, each with its own stream, scheduled and dead sets, counters and
recovery lock, partition i in the middle slot of the i-th of P equal shares of the cluster's
slots, so on Redis Cluster with P >= masters every master holds a partition (on a cluster the
command prints which master holds each); a publish picks a partition by job id (by unique
key when it has one), a worker reads all of them, and status, cancel, dead and stats find
jobs without being told the partition. One partition (the default) is the plain queue
{QUEUE}.

Setting the count the queue has already does nothing and exits 0. Changing it is refused
(exit 1, saying how many of each are left) while the queue holds anything a job left in its
partitions: scheduled, queued, in-progress or dead jobs, or finished records (kept for their
retention). Those live in keys the new count does not read: let them run, purge or replay
the dead ones, wait for the records to expire, or delete the queue first. A change to more
than one partition is refused (exit 2) while the queue has limits ('conveyor limits list
QUEUE'): a partitioned queue cannot hold them; delete them first. The queue's group settings
('conveyor groups') move to the new partitions. Producers need not
stop: the old partitions are closed before the check, and a publish that reaches them is
sent again to the new ones. Running workers follow the change by themselves within about
5 s: they finish or put back their running jobs and read the new partitions. With
--drain the change waits that long, the old partitions closed, for the jobs in them to run.`,
		Example: `  conveyor queues create emails --partitions 3
  conveyor queues create emails              # one partition: the plain queue`,
		Args: exactlyOne("queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if partitions < 1 || partitions > maxPartitions {
				return usageErrorf("--partitions %d: want 1 to %d", partitions, maxPartitions)
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			if drain < 0 || drain > 5*time.Second {
				return usageErrorf("--drain %s: want 0 to 5s (producers wait that long)", drain)
			}
			info, err := insp.CreateQueue(cmd.Context(), args[0], pipeline.QueueOptions{Partitions: partitions, Drain: drain})
			if err != nil {
				return err
			}
			var b strings.Builder
			fmt.Fprintf(&b, "queue %s: %s\n", info.Queue, plural(info.Partitions, "partition"))
			for k, node := range info.Nodes { // on a cluster: who holds each partition now
				fmt.Fprintf(&b, "  partition %d: %s\n", k, node)
			}
			_, err = io.WriteString(a.stdout, b.String())
			return err
		},
	}
	cmd.Flags().IntVar(&partitions, "partitions", 1, fmt.Sprintf("the queue's partition count, 1 to %d", maxPartitions))
	cmd.Flags().DurationVar(&drain, "drain", 0, "how long a change waits, publishes held, for the jobs in flight in the old partitions to run (0 to 5s)")
	return cmd
}

func newQueuesDeleteCmd(a *app) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "delete QUEUE [--force]",
		Short: "Delete a queue with all its jobs, dead jobs, records and counters",
		Long: `Delete every key of a queue (its stream, scheduled and dead sets, job records, counters and
unique keys) and remove it from the known queues. While the queue has unfinished jobs
(scheduled, queued, or held by a worker) or dead jobs (kept for a replay) it refuses, exits 1
and says how many; --force deletes them too. Stop the queue's producers and workers first: a worker still running recreates the
stream it reads, and a job published meanwhile may be lost half-written. When live workers
('conveyor workers') still read the queue, it is deleted all the same and a warning on stderr
names them.`,
		Example: `  conveyor queues delete old-emails
  conveyor queues delete old-emails --force`,
		Args: exactlyOne("queue name"),
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
			if readers, rerr := insp.QueueReaders(cmd.Context(), queue); rerr == nil && len(readers) > 0 {
				fmt.Fprintln(a.stderr, readersWarning(queue, readers))
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "delete the queue even while it has unfinished jobs")
	return cmd
}

// readersWarning is the warning of a deleted queue that live workers still read.
func readersWarning(queue string, readers []pipeline.WorkerInfo) string {
	names := make([]string, len(readers))
	for k, w := range readers {
		names[k] = w.Name
	}
	return fmt.Sprintf("warning: %d live worker(s) still read queue %s: %s. Each makes the queue's stream and "+
		"consumer group again, empty, at its next read, and runs any job published to %s; stop them, or "+
		"restart them without --queue %s.", len(readers), queue, strings.Join(names, ", "), queue, queue)
}
