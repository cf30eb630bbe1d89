package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/pipeline"
)

func init() { addCommand(newStatusCmd) }

func newStatusCmd(a *app) *cobra.Command {
	var queue string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [--queue Q] ID",
		Short: "Show a job's status, attempts, result and last error",
		Long: `Show a job's state. With --json it prints one JSON object with the fields id, queue, type,
status, attempt, max_retries, payload, result, last_error, worker, created_at, run_at,
enqueued_at, started_at and completed_at (times in unix milliseconds, 0 when not yet), and a
few more. Status is one of scheduled, queued, in_progress, completed, failed, canceled.
An unknown id (or one whose record expired after the retention time) exits 1.`,
		Example: `  conveyor status 01JABCDEFGHJKMNPQRSTVWXYZ0
  conveyor status --queue emails 01JABCDEFGHJKMNPQRSTVWXYZ0 --json | jq -r .status`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.inspector()
			if err != nil {
				return err
			}
			j, err := c.Get(cmd.Context(), queue, args[0])
			if err != nil {
				return notFound(err, queue, args[0])
			}
			if asJSON {
				return writeJSON(a.stdout, j)
			}
			return printJob(a.stdout, j, time.Now())
		},
	}
	cmd.Flags().StringVarP(&queue, "queue", "q", pipeline.DefaultQueue, "queue of the job")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the job as one JSON object")
	return cmd
}

// printJob writes a job as aligned "key: value" lines, keyed like the JSON fields.
func printJob(w io.Writer, j *pipeline.Job, now time.Time) error {
	t := newTable(w)
	row := func(k, v string) { fmt.Fprintf(t, "%s:\t%s\n", k, v) }
	row("id", j.ID)
	row("queue", j.Queue)
	row("type", j.Type)
	row("status", string(j.Status))
	row("attempt", strconv.Itoa(j.Attempt))
	row("max_retries", strconv.Itoa(j.MaxRetries))
	if j.Timeout > 0 {
		row("timeout", j.Timeout.String())
	}
	row("worker", orDash(j.Worker))
	row("created_at", formatTime(j.CreatedAt, now))
	row("run_at", formatTime(j.RunAt, now))
	row("enqueued_at", formatTime(j.EnqueuedAt, now))
	row("started_at", formatTime(j.StartedAt, now))
	row("completed_at", formatTime(j.CompletedAt, now))
	row("payload", orDash(string(j.Payload)))
	row("result", orDash(string(j.Result)))
	row("last_error", orDash(j.LastError))
	for _, k := range slices.Sorted(maps.Keys(j.Metadata)) {
		row("meta."+k, j.Metadata[k])
	}
	return t.Flush()
}
