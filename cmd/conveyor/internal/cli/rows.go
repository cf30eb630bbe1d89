package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/pipeline"
)

func init() {
	addCommand(newCancelCmd)
	addCommand(newRunNowCmd)
	addCommand(newDeleteCmd)
}

// rowAction is what the actions on one job share (cancel, run-now, delete: the dashboard's
// row actions): the job's queue found when not given, the Inspector's action, and the line or
// JSON that says it was done.
type rowAction struct {
	use, short, long, done, jsonKey string
	act                             func(ctx context.Context, insp *pipeline.Inspector, queue, id string) error
	refused                         error // the action's wrong-state error
	// refusal, when set, words the refused error (it may read the job); otherwise the
	// error's own message follows the id.
	refusal func(ctx context.Context, insp *pipeline.Inspector, queue, id string) error
}

func newCancelCmd(a *app) *cobra.Command {
	return a.rowCmd(rowAction{
		use:   "cancel [--queue Q] ID",
		short: "Cancel a job that has not finished",
		long: `Cancel a job that has not finished: a scheduled or queued job never runs; a running job's
handler has its context cancelled within a second, from any process (its worker hears the
cancel on the queue's job events, or at its next lease renewal when it missed them), and
whatever it returns is discarded: the job ends canceled, never retried. A task of a workflow
that waits for its dependencies is canceled too, and so are the tasks that wait for a
canceled task. Without --queue the job is looked up in every known queue. An unknown id, or a
job that already finished, exits 1 with the reason. With --json it prints
{"id":..,"queue":..,"canceled":true}.`,
		done:    "canceled %s in queue %s",
		jsonKey: "canceled",
		act: func(ctx context.Context, insp *pipeline.Inspector, queue, id string) error {
			return insp.Cancel(ctx, queue, id)
		},
		refused: pipeline.ErrNotCancelable,
		refusal: func(ctx context.Context, insp *pipeline.Inspector, queue, id string) error {
			if j, err := insp.Get(ctx, queue, id); err == nil {
				return fmt.Errorf("job %s already finished: it is %s", id, j.Status)
			}
			return fmt.Errorf("job %s already finished", id)
		},
	})
}

func newRunNowCmd(a *app) *cobra.Command {
	return a.rowCmd(rowAction{
		use:   "run-now [--queue Q] ID",
		short: "Run a scheduled job now instead of at its due time",
		long: `Move a scheduled job (delayed, a retry waiting for its backoff, or snoozed) into its queue's
stream now, as the scheduler would at its due time: a worker takes it at once. A retry keeps
its attempt count and last error. The move is one script, so a scheduler promoting the job at
the same moment moves it once. A job in any other status (or one waiting for a concurrency
slot of a limit) exits 1 saying what it is; an unknown id exits 1. Without --queue the job is
looked up in every known queue. With --json it prints {"id":..,"queue":..,"run_now":true}.`,
		done:    "moved %s in queue %s into its stream: it runs now",
		jsonKey: "run_now",
		act: func(ctx context.Context, insp *pipeline.Inspector, queue, id string) error {
			return insp.RunNow(ctx, queue, id)
		},
		refused: pipeline.ErrNotScheduled,
	})
}

func newDeleteCmd(a *app) *cobra.Command {
	return a.rowCmd(rowAction{
		use:   "delete [--queue Q] ID",
		short: "Delete a scheduled or queued job, leaving no record",
		long: `Delete a scheduled or queued job entirely: its record, its place in the scheduled set or its
stream entry, its unique and debounce keys, in one step. Unlike cancel, which keeps a canceled
record to read, nothing is left ('status ID' then says not found); the job counts in the
queue's canceled counter. A running job is refused (cancel it), as are a dead one (dead purge)
and a finished one: exit 1 saying what it is. Without --queue the job is looked up in every
known queue. With --json it prints {"id":..,"queue":..,"deleted":true}.`,
		done:    "deleted %s in queue %s",
		jsonKey: "deleted",
		act: func(ctx context.Context, insp *pipeline.Inspector, queue, id string) error {
			return insp.Delete(ctx, queue, id)
		},
		refused: pipeline.ErrNotDeletable,
	})
}

func (a *app) rowCmd(r rowAction) *cobra.Command {
	var queue string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   r.use,
		Short: r.short,
		Long:  r.long,
		Args:  oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, id := cmd.Context(), args[0]
			if queue == "" {
				j, err := a.findJob(cmd, "", id)
				if err != nil {
					return err
				}
				queue = j.Queue
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			if err := r.act(ctx, insp, queue, id); err != nil {
				if errors.Is(err, r.refused) {
					if r.refusal != nil {
						return r.refusal(ctx, insp, queue, id)
					}
					return fmt.Errorf("job %s: %s", id, pipeline.ErrorMessage(err))
				}
				return notFound(err, queue, id)
			}
			if asJSON {
				// {"id":..,"queue":..,"<key>":true}, in that order: scripts compare the line.
				b, err := json.Marshal(struct {
					ID    string `json:"id"`
					Queue string `json:"queue"`
				}{id, queue})
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(a.stdout, "%s,%q:true}\n", b[:len(b)-1], r.jsonKey)
				return err
			}
			_, err = fmt.Fprintf(a.stdout, r.done+"\n", id, queue)
			return err
		},
	}
	cmd.Flags().StringVarP(&queue, "queue", "q", "", "queue of the job (default: look in every known queue)")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"id":..,"queue":..,"`+r.jsonKey+`":true}`)
	return cmd
}
