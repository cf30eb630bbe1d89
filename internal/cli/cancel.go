package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/pipeline"
)

func init() { addCommand(newCancelCmd) }

func newCancelCmd(a *app) *cobra.Command {
	var queue string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "cancel [--queue Q] ID",
		Short: "Cancel a job that has not finished",
		Long: `Cancel a job that has not finished: a scheduled or queued job never runs; a running job's
handler has its context cancelled within a second, from any process (its worker hears the
cancel on the queue's job events, or at its next lease renewal when it missed them), and
whatever it returns is discarded: the job ends canceled, never retried. Without
--queue the job is looked up in every known queue. An unknown id, or a job that already
finished, exits 1 with the reason. With --json it prints {"id":..,"queue":..,"canceled":true}.`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, id := cmd.Context(), args[0]
			if queue == "" {
				j, err := a.findJob(cmd, "", id)
				if err != nil {
					return err
				}
				queue = j.Queue
			}
			c, err := a.inspector()
			if err != nil {
				return err
			}
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
			if asJSON {
				return writeJSON(a.stdout, struct {
					ID       string `json:"id"`
					Queue    string `json:"queue"`
					Canceled bool   `json:"canceled"`
				}{id, queue, true})
			}
			_, err = fmt.Fprintf(a.stdout, "canceled %s in queue %s\n", id, queue)
			return err
		},
	}
	cmd.Flags().StringVarP(&queue, "queue", "q", "", "queue of the job (default: look in every known queue)")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"id":..,"queue":..,"canceled":true}`)
	return cmd
}
