package cli

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

func init() { addCommand(newListCmd) }

// listable are the statuses that an index holds, so that they can be listed.
var listable = status.Listable()

func newListCmd(a *app) *cobra.Command {
	var queue, want, cursor string
	var limit int
	var asJSON, allQueues bool
	cmd := &cobra.Command{
		Use:   "list [--queue Q | --all-queues] --status S [--limit N] [--cursor C] [--json]",
		Short: "List a queue's jobs by status, a page at a time",
		Long: `List the jobs of a queue that are waiting (workflow tasks waiting for their dependencies,
oldest first), scheduled (by due time, then those waiting for a concurrency limit's slot),
queued (in stream order, not yet handed to a worker, then those waiting for a place in their
fair group), in_progress (held by a worker: its name and how long since it last renewed
its lease), failed (dead: the dead set, newest first; --status dead says the same: failed is
the wire name of a dead job, in --json and the API), completed or canceled (newest first, while
retained: the queue's default retention, at most the newest 10,000 a partition; a job kept
longer by its own retention is still found with 'conveyor status ID').

It prints a page of at most --limit jobs (1 to 1000) and, on stderr, the cursor of the next page
("next page: --cursor C"); nothing when the page is the last. A page may be short, even empty,
before the end: jobs that changed status meanwhile are left out. With --json it prints
{"jobs": [...], "next": "..."} with each job as 'status --json' prints it, and for in_progress
"leases": {id: {"worker", "entry", "idle_ms", "deliveries"}}; next is "" at the end. The table's
PRIORITY is the job's level within its queue, 1 (served first, the default) to 4. WHY says why a
scheduled, queued or waiting job is not running (cut to 60 characters; 'conveyor status ID'
prints it whole), and --json's jobs carry it as waiting_for {"kind", "detail", ...}.

With --all-queues (or --queue '*') it lists the status across every known queue: queue after
queue in name order, each in the order above, with a QUEUE column (each job's "queue" in
--json). Its cursor is "<queue>/<that queue's cursor>".`,
		Example: `  conveyor list --status queued
  conveyor list --queue emails --status dead --limit 20
  conveyor list --status scheduled --cursor 1767225600000:01JABCDEFGHJKMNPQRSTVWXYZ0
  conveyor list --status in_progress --json | jq '.leases'
  conveyor list --status completed --limit 20 --json | jq -r '.jobs[].id'
  conveyor list --all-queues --status scheduled`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s := status.Parse(want) // "dead" is failed's word
			if !slices.Contains(listable, s) {
				return usageErrorf("--status %q: want one of %s", want, joinStatuses(listable))
			}
			if limit < 1 || limit > maxPageLimit {
				return usageErrorf("--limit must be 1 to %d, not %d", maxPageLimit, limit)
			}
			across, err := acrossQueues(cmd, queue, allQueues)
			if err != nil {
				return err
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			page := pipeline.Page{Cursor: cursor, Limit: limit}
			var p *pipeline.JobPage
			if across {
				p, err = insp.ListAllQueues(cmd.Context(), s, page)
			} else {
				p, err = insp.List(cmd.Context(), queue, s, page)
			}
			if errors.Is(err, pipeline.ErrInvalid) {
				return usageError{err} // a bad --queue or --cursor
			}
			if err != nil {
				return err
			}
			if len(p.Jobs) == 0 && cursor == "" && !across {
				// Nothing listed: a queue that does not exist is an error, as in stats and
				// dead list, not an empty page (a typo would look like an idle queue).
				if err := a.requireQueue(cmd.Context(), queue, nil); err != nil {
					return err
				}
			}
			if asJSON {
				return writeJSON(a.stdout, p)
			}
			if len(p.Jobs) == 0 {
				// Said on stderr, as every other command says "nothing": stdout holds rows
				// only, for a pipe.
				what := "no " + s.Word() + " jobs"
				if p.Next != "" {
					what += " on this page"
				}
				where := "queue " + queue
				if across {
					where = "any queue"
				}
				fmt.Fprintf(a.stderr, "%s in %s\n", what, where)
			} else if err := printJobs(a.stdout, s, p, across); err != nil {
				return err
			}
			if p.Next != "" {
				fmt.Fprintf(a.stderr, "next page: --cursor %s\n", p.Next)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&queue, "queue", "q", pipeline.DefaultQueue, "queue whose jobs to list")
	f.StringVar(&want, "status", "", statusChoices())
	f.IntVar(&limit, "limit", 50, "list at most this many jobs (1 to 1000)")
	f.StringVar(&cursor, "cursor", "", "start after the page that printed this cursor")
	f.BoolVar(&asJSON, "json", false, `print {"jobs": [...], "next": "..."}`)
	addAllQueuesFlag(cmd, &allQueues, "list the jobs")
	_ = cmd.MarkFlagRequired("status")
	return cmd
}

// statusChoices is --status's help: the listable statuses, each with the word a person reads
// for it where that differs, "failed (dead)".
func statusChoices() string {
	s := make([]string, len(listable))
	for i, x := range listable {
		s[i] = string(x)
		if w := x.Word(); w != string(x) {
			s[i] += " (" + w + ")"
		}
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

func joinStatuses(list []status.Status) string {
	s := make([]string, len(list))
	for i, x := range list {
		s[i] = string(x)
	}
	return strings.Join(s, ", ")
}

// printJobs writes a page of jobs as a table whose time columns suit the status, each row
// starting with its job's queue when the page is across queues.
func printJobs(w io.Writer, st status.Status, p *pipeline.JobPage, across bool) error {
	t := newTable(w)
	if across {
		fmt.Fprint(t, "QUEUE\t")
	}
	switch st {
	case status.Scheduled:
		fmt.Fprintln(t, "ID\tTYPE\tSTATUS\tPRIORITY\tATTEMPT\tRUN_AT\tCREATED_AT\tWHY\tLAST_ERROR")
	case status.Queued:
		fmt.Fprintln(t, "ID\tTYPE\tSTATUS\tPRIORITY\tATTEMPT\tENQUEUED_AT\tCREATED_AT\tWHY")
	case status.InProgress:
		fmt.Fprintln(t, "ID\tTYPE\tSTATUS\tPRIORITY\tATTEMPT\tSTARTED_AT\tWORKER\tIDLE")
	case status.Failed:
		fmt.Fprintln(t, "ID\tTYPE\tSTATUS\tPRIORITY\tATTEMPT\tDEAD_SINCE\tLAST_ERROR")
	case status.Completed:
		fmt.Fprintln(t, "ID\tTYPE\tSTATUS\tPRIORITY\tATTEMPT\tCOMPLETED_AT\tWORKER\tCREATED_AT")
	case status.Canceled:
		fmt.Fprintln(t, "ID\tTYPE\tSTATUS\tPRIORITY\tATTEMPT\tCANCELED_AT\tCREATED_AT")
	default: // a status with no columns of its own
		fmt.Fprintln(t, "ID\tTYPE\tSTATUS\tPRIORITY\tATTEMPT\tCREATED_AT\tWHY")
	}
	for _, j := range p.Jobs {
		if across {
			fmt.Fprintf(t, "%s\t", j.Queue)
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%d\t%d\t", j.ID, orDash(j.Type), j.Status.Word(),
			max(j.Priority, pipeline.MinPriority), j.Attempt)
		switch st {
		case status.Scheduled:
			fmt.Fprintf(t, "%s\t%s\t%s\t%s\n", tableTime(j.RunAt), tableTime(j.CreatedAt), why(j), oneLine(j.LastError, 60))
		case status.Queued:
			fmt.Fprintf(t, "%s\t%s\t%s\n", tableTime(j.EnqueuedAt), tableTime(j.CreatedAt), why(j))
		case status.InProgress:
			idle := "-"
			if l, ok := p.Leases[j.ID]; ok {
				idle = l.Idle.Round(time.Millisecond).String()
			}
			fmt.Fprintf(t, "%s\t%s\t%s\n", tableTime(j.StartedAt), orDash(j.Worker), idle)
		case status.Failed:
			fmt.Fprintf(t, "%s\t%s\n", tableTime(j.CompletedAt), oneLine(j.LastError, 80))
		case status.Completed:
			fmt.Fprintf(t, "%s\t%s\t%s\n", tableTime(j.CompletedAt), orDash(j.Worker), tableTime(j.CreatedAt))
		case status.Canceled:
			fmt.Fprintf(t, "%s\t%s\n", tableTime(j.CompletedAt), tableTime(j.CreatedAt))
		default:
			fmt.Fprintf(t, "%s\t%s\n", tableTime(j.CreatedAt), why(j))
		}
	}
	return t.Flush()
}

// whyWidth bounds the WHY column: the reason's detail, cut (status ID prints it whole).
const whyWidth = 60

// why is a listed job's WHY cell: why it is not running (Job.WaitingFor's detail), "-" when
// the listing says nothing.
func why(j *pipeline.Job) string {
	if j.WaitingFor == nil {
		return "-"
	}
	return oneLine(j.WaitingFor.Detail, whyWidth)
}
