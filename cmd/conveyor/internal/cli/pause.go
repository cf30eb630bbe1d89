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
		Long: `Pause a queue: every worker stops reading it (all its partitions), and until 'conveyor
resume' takes none of its jobs. The command returns once every live worker that reads the
queue (those 'conveyor workers' lists) has confirmed that its reads of the queue under way have
ended, or after 5 seconds: from then on, no job published to the queue starts on a worker that
confirmed. A worker that did not confirm in time is named on stderr; it stops reading the queue
within a second of reading the pause (or has stopped without removing its record). Jobs running
or already read when the pause lands finish; queued jobs wait; scheduled and retried jobs are
still promoted when due and wait, queued; recovery goes on; nothing is lost. The state is in
Redis, shared by every worker and kept across restarts: a worker started on a paused queue
takes nothing from it. 'conveyor queues' and 'stats' show the queue as paused. Pausing a paused
queue changes nothing, waits for the confirmations alike and exits 0, as does a pause that not
every worker confirmed; a queue that does not exist exits 1. With --json it prints
{"queue":..,"paused":true,"workers":[..],"unconfirmed":[..]}: the live workers reading the
queue and those that did not confirm.`,
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
			var pc pipeline.PauseConfirmation
			if pause {
				pc, err = insp.PauseConfirmed(cmd.Context(), queue, defaultPauseConfirmTimeout)
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
			if pause {
				for _, w := range pc.Unconfirmed {
					fmt.Fprintf(a.stderr, "worker %s did not confirm the pause within %v: it stops reading the queue within a second of reading the pause, or it is gone\n",
						w, defaultPauseConfirmTimeout)
				}
			}
			if asJSON {
				if !pause {
					return writeJSON(a.stdout, struct {
						Queue  string `json:"queue"`
						Paused bool   `json:"paused"`
					}{queue, pause})
				}
				return writeJSON(a.stdout, struct {
					Queue       string   `json:"queue"`
					Paused      bool     `json:"paused"`
					Workers     []string `json:"workers"`
					Unconfirmed []string `json:"unconfirmed"`
				}{queue, pause, nonNil(pc.Workers), nonNil(pc.Unconfirmed)})
			}
			if !pause {
				_, err = fmt.Fprintf(a.stdout, "%s queue %s\n", verb, queue)
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "paused queue %s: %s\n", queue, pauseSummary(pc))
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

// pauseSummary says what a pause of a queue took effect on (pipeline.PauseConfirmed).
func pauseSummary(pc pipeline.PauseConfirmation) string {
	switch n, ok := len(pc.Workers), len(pc.Workers)-len(pc.Unconfirmed); {
	case n == 0:
		return "no live worker reads it; none takes its jobs until it is resumed"
	case ok == n:
		return fmt.Sprintf("%s reading it confirmed; none starts a job published from now on until it is resumed",
			plural(n, "live worker"))
	default:
		return fmt.Sprintf("%d of the %d live workers reading it confirmed (the others are named above)", ok, n)
	}
}

// nonNil is s, or an empty slice for nil, so that JSON shows [] rather than null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
