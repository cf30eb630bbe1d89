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

	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

func init() { addCommand(newStatusCmd) }

func newStatusCmd(a *app) *cobra.Command {
	var queue string
	var asJSON, follow, logs bool
	cmd := &cobra.Command{
		Use:   "status [--queue Q] [--follow] ID",
		Short: "Show a job's status, attempts, result and last error",
		Long: `Show a job's state. With --json it prints one JSON object with the fields id, queue, type,
status, attempt, max_retries, priority, payload, result, last_error, worker, created_at, run_at,
enqueued_at, started_at and completed_at (times in unix milliseconds, 0 when not yet), attempts,
and a few more. created_at is the job's first publish (a retry or a replay does not change
it); enqueued_at is its last entry into the stream; started_at, worker and completed_at are
its last attempt's. attempts lists the last 20 attempts, oldest first, each
{"attempt", "worker", "started_at", "ended_at", "outcome", "error"} with outcome retry,
snooze, lost (its worker died), failed (the attempt that sent it to the dead set: "dead" in the
table), completed, canceled or running, and a row "replayed" (attempt 0, "-" in the table) where
a replay from the dead set started a fresh set of attempts, numbered from 1 again; the human
output prints them as a table. A snoozed run is not counted in attempt (the next run has its
number too): the table says so beside it, and lists the snoozed run. Status is one of
scheduled, queued, in_progress, completed, failed, canceled; the table says "dead" for failed
(failed is the wire name of a dead job, as in --json).
Without --queue the job is looked up in every known queue (one lookup per queue) and the
output names the queue it was found in. An unknown id (or one whose record expired after the
retention time) exits 1, saying which queues were searched.

A running job whose handler reports progress (Job.Progress; the ready "sleep" handler does)
shows it as progress (0-100), progress_message and progress_at; a finished job keeps its last
attempt's last report. These rows and JSON fields are absent when the attempt reported none.

A job that is not running (waiting, scheduled or queued) shows why in waiting_for: a line and
its reason's kind (no_worker_queue, paused, no_worker_type, dependencies, concurrency_limit,
rate_limit, group_window, debounce, due, priority, ready); --json carries it as waiting_for
{"kind", "detail", and the facts of the kind: "cause", "until", "scope", "held", "slots",
"group", "position", "tasks", "jobs"}, absent while the job runs or once it ended.
With --follow the command prints the job, then a line (with --json, a JSON object) each time
its status, attempt or progress changes, until it is completed, failed or canceled; it exits 0
then, whatever the status (read it from the last line), and 1 when the job goes or Redis fails.

With --logs it prints, after the attempts, the lines the job's handler logged (Job.Logger,
Job.Logf), by attempt: each attempt that logged, its outcome, how many earlier lines were cut
(an attempt keeps its last 200 lines or 32 KiB), and the lines as zerolog's console writer
shows them. With --json the job's object gets the field "logs": one object an attempt that
logged, oldest first, {"attempt", "outcome", "ended_at", "cut", "lines"}, lines being the JSON
objects zerolog wrote, as strings. The attempt that runs now shows the lines its last progress
report wrote (outcome running); an attempt cut short (its worker killed, put back on shutdown:
lost; its job canceled while it ran: canceled) kept only those. Lines a worker with keys
sealed are opened with --keys (or $` + envKeys + `); without their key an attempt's lines are the
one line <encrypted, N bytes, key K>, and with --json its object gets "encrypted": {"key",
"bytes"}. --logs cannot be used with --follow.`,
		Example: `  conveyor status 01JABCDEFGHJKMNPQRSTVWXYZ0
  conveyor status --queue emails 01JABCDEFGHJKMNPQRSTVWXYZ0 --json | jq -r .status
  conveyor status --follow 01JABCDEFGHJKMNPQRSTVWXYZ0
  conveyor status --logs 01JABCDEFGHJKMNPQRSTVWXYZ0`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if logs && follow {
				return usageErrorf("--logs and --follow cannot be used together")
			}
			j, err := a.findJob(cmd, queue, args[0])
			if err != nil {
				return err
			}
			if follow {
				return a.followJob(cmd, j, asJSON)
			}
			var ls []pipeline.AttemptLog
			if logs {
				in, err := a.inspector()
				if err != nil {
					return err
				}
				if ls, err = in.JobLogs(cmd.Context(), j.Queue, j.ID); err != nil {
					return notFound(err, j.Queue, j.ID)
				}
			}
			if asJSON {
				if logs {
					return writeJobWithLogs(a.stdout, j, ls)
				}
				return writeJSON(a.stdout, j)
			}
			if err := printJob(a.stdout, j, time.Now()); err != nil || !logs {
				return err
			}
			return printLogs(a.stdout, ls)
		},
	}
	cmd.Flags().StringVarP(&queue, "queue", "q", "", "queue of the job (default: look in every known queue)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the job as one JSON object")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "print each change of the job's status and progress until it ends")
	cmd.Flags().BoolVar(&logs, "logs", false, "print the lines the job's handler logged, by attempt")
	return cmd
}

// followJob prints j, then a line per change (status, attempt, progress) until it is final.
func (a *app) followJob(cmd *cobra.Command, j *pipeline.Job, asJSON bool) error {
	client, err := a.client()
	if err != nil {
		return err
	}
	if !asJSON {
		if err := printJob(a.stdout, j, time.Now()); err != nil {
			return err
		}
	}
	in, err := a.inspector()
	if err != nil {
		return err
	}
	err = client.Follow(cmd.Context(), j.Queue, j.ID, func(j *pipeline.Job) error {
		// Why it waits, read at each change of a job that is not running (none while it runs).
		if err := in.Explain(cmd.Context(), j); err != nil {
			return err
		}
		if asJSON {
			return writeJSON(a.stdout, j)
		}
		_, err := fmt.Fprintln(a.stdout, followLine(j))
		return err
	})
	if errors.Is(err, pipeline.ErrNotFound) {
		return fmt.Errorf("job %s is gone from queue %s (its retention ended)", j.ID, j.Queue)
	}
	return err
}

// followLine is one line of status --follow: the job's status and attempt, and its progress
// when it has any.
func followLine(j *pipeline.Job) string {
	line := time.Now().Format("15:04:05.000") + " " + j.Status.Word() + " attempt " + strconv.Itoa(j.Attempt)
	if p := j.Reported; p != nil {
		line += " progress " + strconv.Itoa(p.Percent) + "%"
		if p.Message != "" {
			line += " " + p.Message
		}
	}
	if w := j.WaitingFor; w != nil {
		line += " waiting for: " + w.Detail
	}
	if j.Status.Final() && j.LastError != "" && j.Status != status.Completed {
		line += " last_error " + j.LastError
	}
	return line
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
	row("status", j.Status.Word()) // "dead" for failed, the wire name (--json)
	if w := j.WaitingFor; w != nil {
		row("waiting_for", w.Detail+" ("+string(w.Kind)+")")
	}
	if p := j.Reported; p != nil {
		row("progress", strconv.Itoa(p.Percent)+"%")
		row("progress_message", orDash(p.Message))
		row("progress_at", formatTime(p.At, now))
	}
	attempt := strconv.Itoa(j.Attempt)
	if j.Snoozes > 0 {
		// A snoozed run is no attempt (its number is the next run's too): say so beside the
		// count, or a job that ran reads as one that never did.
		attempt += " (snoozed runs are not counted)"
	}
	row("attempt", attempt)
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
	row("payload", orDash(shownBytes(j.Payload)))
	row("result", orDash(shownBytes(j.Result)))
	row("last_error", orDash(j.LastError))
	if j.Status == status.Scheduled && j.ScheduledFor != "" {
		row("scheduled_for", j.ScheduledFor)
	}
	if j.Snoozes > 0 {
		row("snoozes", strconv.Itoa(j.Snoozes))
	}
	for _, k := range slices.Sorted(maps.Keys(j.Metadata)) {
		row("meta."+k, j.Metadata[k])
	}
	if err := t.Flush(); err != nil {
		return err
	}
	return printAttempts(w, j.Attempts)
}

// printAttempts writes a job's attempts (Job.Attempts) as a table under "attempts:"; nothing
// for a job that never started.
func printAttempts(w io.Writer, as []pipeline.JobAttempt) error {
	if len(as) == 0 {
		return nil
	}
	fmt.Fprintln(w, "attempts:")
	t := newTable(w)
	fmt.Fprintln(t, "  #\tOUTCOME\tWORKER\tSTARTED\tENDED\tERROR")
	for _, a := range as {
		n := strconv.Itoa(a.Number)
		if a.Outcome == status.AttemptReplayed { // a mark, no attempt: the next ones count from 1
			n = "-"
		}
		fmt.Fprintf(t, "  %s\t%s\t%s\t%s\t%s\t%s\n", n, status.AttemptWord(a.Outcome), orDash(a.Worker),
			tableTime(a.StartedAt), tableTime(a.EndedAt), oneLine(a.Error, 80))
	}
	return t.Flush()
}

// shownBytes is a payload or result as a person reads it: a sealed one (read without --keys)
// as "<encrypted, N bytes, key K>", never its ciphertext.
func shownBytes(b []byte) string {
	if d := keyring.Describe(b); d != "" {
		return d
	}
	return string(b)
}
