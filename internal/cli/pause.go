package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/pipeline"
)

func init() {
	addCommand(func(a *app) *cobra.Command { return newPauseCmd(a, true) })
	addCommand(func(a *app) *cobra.Command { return newPauseCmd(a, false) })
}

// newPauseCmd builds 'conveyor pause' (pause true) or 'conveyor resume'.
func newPauseCmd(a *app, pause bool) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "pause QUEUE [--json]",
		Short: "Pause a queue: every worker stops taking its jobs",
		Long: `Pause a queue: every worker stops reading it (all its partitions) within one read, and
until 'conveyor resume' takes none of its jobs. Jobs running when the pause lands finish;
queued jobs wait; scheduled and retried jobs are still promoted when due and wait, queued;
recovery goes on; nothing is lost. The state is in Redis, shared by every worker and kept
across restarts: a worker started on a paused queue takes nothing from it. 'conveyor queues'
and 'stats' show the queue as paused. Pausing a paused queue does nothing and exits 0; a
queue that does not exist exits 1. With --json it prints {"queue":..,"paused":true}.`,
		Example: `  conveyor pause emails
  conveyor resume emails`,
		Args: exactlyOne("queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			queue := args[0]
			if err := checkIDs(queue, nil); err != nil {
				return err
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			verb := "paused"
			if pause {
				err = insp.Pause(cmd.Context(), queue)
			} else {
				verb = "resumed"
				err = insp.Resume(cmd.Context(), queue)
			}
			if errors.Is(err, pipeline.ErrQueueNotFound) {
				names, nerr := insp.QueueNames(cmd.Context())
				if nerr != nil {
					return err
				}
				return queueNotFound(queue, a.prefix, names)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, struct {
					Queue  string `json:"queue"`
					Paused bool   `json:"paused"`
				}{queue, pause})
			}
			_, err = fmt.Fprintf(a.stdout, "%s queue %s\n", verb, queue)
			return err
		},
	}
	if !pause {
		cmd.Use = "resume QUEUE [--json]"
		cmd.Short = "Resume a paused queue: workers take its jobs again"
		cmd.Long = `Resume a queue paused with 'conveyor pause': every worker reads it again within one read of
the change, and the jobs that waited run. Resuming a queue that is not paused does nothing and
exits 0; a queue that does not exist exits 1. With --json it prints {"queue":..,"paused":false}.`
		cmd.Example = `  conveyor resume emails`
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"queue":..,"paused":..}`)
	return cmd
}
