package cli

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
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
status, attempt, max_retries, priority, payload, result, last_error, worker, created_at, run_at,
enqueued_at, started_at and completed_at (times in unix milliseconds, 0 when not yet), and a
few more. Status is one of scheduled, queued, in_progress, completed, failed, canceled.
Without --queue the job is looked up in every known queue (one lookup per queue) and the
output names the queue it was found in. An unknown id (or one whose record expired after the
retention time) exits 1, saying which queues were searched.`,
		Example: `  conveyor status 01JABCDEFGHJKMNPQRSTVWXYZ0
  conveyor status --queue emails 01JABCDEFGHJKMNPQRSTVWXYZ0 --json | jq -r .status`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			j, err := a.findJob(cmd, queue, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, j)
			}
			return printJob(a.stdout, j, time.Now())
		},
	}
	cmd.Flags().StringVarP(&queue, "queue", "q", "", "queue of the job (default: look in every known queue)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the job as one JSON object")
	return cmd
}

// findJob reads job id from queue, or, when queue is empty, from whichever known queue has it.
func (a *app) findJob(cmd *cobra.Command, queue, id string) (*pipeline.Job, error) {
	in, err := a.inspector()
	if err != nil {
		return nil, err
	}
	if queue != "" {
		j, err := in.Get(cmd.Context(), queue, id)
		if err != nil {
			return nil, notFound(err, queue, id)
		}
		return j, nil
	}
	j, searched, err := in.Find(cmd.Context(), id)
	if errors.Is(err, pipeline.ErrNotFound) {
		if len(searched) == 0 {
			return nil, fmt.Errorf("job %s not found: there are no queues yet", id)
		}
		return nil, fmt.Errorf("job %s not found in any known queue (searched %s); give --queue if it is in another", id, strings.Join(searched, ", "))
	}
	return j, err
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
	row("priority", strconv.Itoa(max(j.Priority, pipeline.MinPriority)))
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
	if j.Status == pipeline.StatusScheduled && j.ScheduledFor != "" {
		row("scheduled_for", j.ScheduledFor)
	}
	if j.Snoozes > 0 {
		row("snoozes", strconv.Itoa(j.Snoozes))
	}
	for _, k := range slices.Sorted(maps.Keys(j.Metadata)) {
		row("meta."+k, j.Metadata[k])
	}
	return t.Flush()
}
