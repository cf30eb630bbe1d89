package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/pipeline"
)

func init() { addCommand(newCancelCmd) }

func newCancelCmd(a *app) *cobra.Command {
	var queue string
	cmd := &cobra.Command{
		Use:   "cancel [--queue Q] ID",
		Short: "Cancel a job that has not finished",
		Long: `Cancel a job that has not finished: a scheduled or queued job never runs; a running job's
handler is cancelled at its worker's next lease renewal and its result is discarded. An unknown
id, or a job that already finished, exits 1 with the reason.`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.inspector()
			if err != nil {
				return err
			}
			ctx, id := cmd.Context(), args[0]
			err = c.Cancel(ctx, queue, id)
			if errors.Is(err, pipeline.ErrNotCancelable) {
				if j, gerr := c.Get(ctx, queue, id); gerr == nil {
					return fmt.Errorf("job %s already finished: it is %s", id, j.Status)
				}
				return fmt.Errorf("job %s already finished", id)
			}
			if err != nil {
				return notFound(err, queue, id)
			}
			_, err = fmt.Fprintf(a.stdout, "canceled %s\n", id)
			return err
		},
	}
	cmd.Flags().StringVarP(&queue, "queue", "q", pipeline.DefaultQueue, "queue of the job")
	return cmd
}
