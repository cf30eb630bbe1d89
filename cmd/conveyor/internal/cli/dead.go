package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

func init() { addCommand(newDeadCmd) }

func newDeadCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dead",
		Short: "List, replay and purge jobs in a queue's dead set",
		Long: `A job lands in its queue's dead set when its retries are exhausted, when its handler says
not to retry, or when its stream entry could not be read. A job whose type no worker has a
handler for is retried like a failed attempt (a newer worker may know it) and lands here when its
retries are exhausted. Dead jobs stay until they are replayed or purged.

'dead list' prints one line per job on stdout and its header, footer and next-page hint on
stderr, so that its output pipes into the others:

  conveyor dead list -q emails | awk '{print $1}' | xargs conveyor dead replay -q emails`,
		Args: unknownSubcommand,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newDeadListCmd(a), newDeadReplayCmd(a), newDeadPurgeCmd(a))
	return cmd
}

func newDeadListCmd(a *app) *cobra.Command {
	var queue, cursor string
	var limit, offset int
	var asJSON, allQueues bool
	cmd := &cobra.Command{
		Use:   "list [--queue Q | --all-queues] [--limit N] [--offset N | --cursor C] [--json]",
		Short: "List dead jobs, newest first",
		Long: `List dead jobs, newest first: a table of ID, TYPE, ATTEMPTS, DEAD_SINCE (local time, with its
zone) and LAST_ERROR. Only the rows go to stdout; the header, the footer ("jobs 1-50 of 120") and the
next page's cursor go to stderr, so that 'awk '{print $1}'' gets the ids alone. --cursor starts
where the previous page ended, which costs less than a deep --offset (skipped jobs are read
too). A queue with no dead jobs says so on stderr and exits 0; a queue that is not known exits 1.

With --json it prints {"jobs": [...], "next": "..."}, the shape of every list ('conveyor list
--json', the API): each job as 'status --json' prints it, and next the cursor of the next page
("" on the last one).

With --all-queues (or --queue '*') it lists the dead jobs of every known queue: queue after
queue in name order, each newest first, with a QUEUE column first (each job's "queue" in
--json). The footer counts the dead jobs of all queues; "no dead jobs in any queue" exits 0.
Its cursor is "<queue>/<that queue's cursor>".`,
		Example: `  conveyor dead list --queue emails
  conveyor dead list --all-queues
  conveyor dead list --queue emails --limit 20 --cursor 1767225600000:01JABCDEFGHJKMNPQRSTVWXYZ0
  conveyor dead list --queue emails | awk '{print $1}' | xargs conveyor dead replay --queue emails`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var errs []error
			if limit < 1 {
				errs = append(errs, usageErrorf("--limit must be at least 1, not %d", limit))
			}
			if offset < 0 {
				errs = append(errs, usageErrorf("--offset must not be negative, not %d", offset))
			}
			if offset > 0 && cursor != "" {
				errs = append(errs, usageErrorf("--offset and --cursor cannot be used together"))
			}
			across, err := acrossQueues(cmd, queue, allQueues)
			if err != nil {
				errs = append(errs, err)
			} else if !across {
				if err := checkIDs(queue, nil); err != nil {
					errs = append(errs, err)
				}
			}
			if len(errs) > 0 {
				return errors.Join(errs...)
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			// The dead jobs to count ("jobs 1-50 of 120"): the queue's, or every queue's.
			var st *pipeline.QueueStats
			list := func(p pipeline.Page) (*pipeline.JobPage, error) { return insp.List(ctx, queue, status.Failed, p) }
			where := "queue " + queue
			if across {
				list = func(p pipeline.Page) (*pipeline.JobPage, error) { return insp.ListAllQueues(ctx, status.Failed, p) }
				where = "any queue"
				all, err := insp.Queues(ctx)
				if err != nil {
					return err
				}
				st = &pipeline.QueueStats{}
				for _, q := range all {
					st.Dead += q.Dead
				}
			} else if st, err = insp.Stats(ctx, queue); err != nil {
				return err
			}
			// Skip offset jobs, then take limit, a page of at most maxPageLimit at a time.
			var jobs []*pipeline.Job
			skip, more := offset, true
			for more && (skip > 0 || len(jobs) < limit) {
				n := limit - len(jobs)
				if skip > 0 {
					n = skip
				}
				p, err := list(pipeline.Page{Cursor: cursor, Limit: min(n, maxPageLimit)})
				if err != nil {
					if errors.Is(err, pipeline.ErrInvalid) && cursor != "" {
						return usageError{err}
					}
					return err
				}
				cursor, more = p.Next, p.Next != ""
				if skip > 0 {
					skip -= len(p.Jobs)
					continue
				}
				jobs = append(jobs, p.Jobs...)
			}
			if len(jobs) == 0 && !across {
				if err := a.requireQueue(ctx, queue, st); err != nil {
					return err
				}
			}
			if asJSON {
				// The shape of every list (list --json, the API): the next page's cursor in
				// the JSON, "" on the last page.
				next := ""
				if more {
					next = cursor
				}
				return writeJSON(a.stdout, &pipeline.JobPage{Jobs: jobs, Next: next})
			}
			switch {
			case len(jobs) > 0:
				if err := printDeadJobs(a.stdout, a.stderr, jobs, across); err != nil {
					return err
				}
			case st.Dead == 0:
				fmt.Fprintf(a.stderr, "no dead jobs in %s\n", where)
				return nil
			case cmd.Flags().Changed("cursor"):
				fmt.Fprintf(a.stderr, "no more dead jobs in %s (of %d)\n", where, st.Dead)
				return nil
			default:
				fmt.Fprintf(a.stderr, "no dead jobs in %s from offset %d (of %d)\n", where, offset, st.Dead)
				return nil
			}
			if cmd.Flags().Changed("cursor") {
				fmt.Fprintf(a.stderr, "%s (of %d)\n", plural(len(jobs), "job"), st.Dead)
			} else {
				fmt.Fprintf(a.stderr, "jobs %d-%d of %d\n", offset+1, offset+len(jobs), st.Dead)
			}
			if more {
				fmt.Fprintf(a.stderr, "next page: --cursor %s\n", cursor)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&queue, "queue", "q", pipeline.DefaultQueue, "queue whose dead set to list")
	f.IntVar(&limit, "limit", 50, "list at most this many jobs")
	f.IntVar(&offset, "offset", 0, "skip this many of the newest jobs")
	f.StringVar(&cursor, "cursor", "", "start after the page that printed this cursor")
	f.BoolVar(&asJSON, "json", false, `print {"jobs": [...], "next": "..."}`)
	addAllQueuesFlag(cmd, &allQueues, "list the dead jobs")
	return cmd
}

// printDeadJobs writes dead jobs as a table: its header line to head (stderr), its rows to
// rows (stdout), aligned together. A table across queues starts each row with its job's queue.
func printDeadJobs(rows, head io.Writer, jobs []*pipeline.Job, across bool) error {
	var buf bytes.Buffer
	t := newTable(&buf)
	if across {
		fmt.Fprint(t, "QUEUE\t")
	}
	fmt.Fprintln(t, "ID\tTYPE\tATTEMPTS\tDEAD_SINCE\tLAST_ERROR")
	for _, j := range jobs {
		if across {
			fmt.Fprintf(t, "%s\t", j.Queue)
		}
		fmt.Fprintf(t, "%s\t%s\t%d\t%s\t%s\n", j.ID, orDash(j.Type), j.Attempt, tableTime(j.CompletedAt), oneLine(j.LastError, 80))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	header, body, _ := bytes.Cut(buf.Bytes(), []byte("\n"))
	if _, err := fmt.Fprintf(head, "%s\n", header); err != nil {
		return err
	}
	_, err := rows.Write(body)
	return err
}

// oneLine shortens s to one line of at most n runes for a table cell.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return orDash(s)
}

// dedupe returns ids without repeats, in their first order.
func dedupe(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	var out []string
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// idError is one id a command could not act on, in --json output.
type idError struct {
	ID    string `json:"id"`
	Error string `json:"error"`
}

// deadError says why a dead-set operation on id was refused, naming the job's status when it
// is not dead, and reports whether the refusal is the job's own (ok: the command goes on with
// the other ids). Any other error (Redis failing, say) is not: the command stops there.
func deadError(ctx context.Context, insp *pipeline.Inspector, queue, id string, err error) (_ error, ok bool) {
	switch {
	case errors.Is(err, pipeline.ErrNotFound):
		return notFound(err, queue, id), true
	case errors.Is(err, pipeline.ErrNotDead):
		if j, gerr := insp.Get(ctx, queue, id); gerr == nil {
			return fmt.Errorf("job %s is %s, not dead", id, j.Status), true
		}
		return err, true
	case errors.Is(err, pipeline.ErrUniqueHeld), errors.Is(err, pipeline.ErrInvalid):
		// Replay: another job holds its unique key, or an unreadable entry's record has no type.
		return plainError(err), true
	}
	return err, false
}

// plainError keeps err's message but not its chain: a refusal by the system whose chain holds
// pipeline.ErrInvalid (a dead record with no type) would otherwise exit 2, as a usage error.
func plainError(err error) error {
	if err == nil {
		return nil
	}
	return errors.New(err.Error())
}

// replayReport is the --json output of 'dead replay'.
type replayReport struct {
	Count    int       `json:"count"`
	Replayed []string  `json:"replayed,omitempty"`
	Failed   []idError `json:"failed,omitempty"`
	Error    string    `json:"error,omitempty"`
}

func newDeadReplayCmd(a *app) *cobra.Command {
	var queue string
	var all, asJSON, allQueues bool
	cmd := &cobra.Command{
		Use:   "replay [--queue Q] ID... | --all | --all-queues",
		Short: "Move dead jobs back into the queue for a fresh set of attempts",
		Long: `Move dead jobs back into the queue for a fresh set of attempts, printing each replayed id
on stdout. Ids that are unknown or not dead are reported on stderr, the others are replayed all
the same, and the command exits 1. A malformed id is a usage error (exit 2): nothing is
replayed.

With --all it replays every job in the dead set (those that die while it runs wait for the next
time) and prints "replayed N dead jobs"; dead records that cannot run again (an unreadable
entry's, which has no type, or a job whose unique key another job holds now) stay, are
reported on stderr, and the command exits 1. --all on a queue that is not known exits 1.

With --json it prints one JSON object, also when some jobs were not replayed:
  ids:   {"count": N, "replayed": [ID...], "failed": [{"id": ID, "error": MESSAGE}...]}
  --all: {"count": N, "error": MESSAGE}
count being how many were replayed; empty fields are left out.

With --all-queues (or --queue '*'; --all is then implied) it does --all on every known queue
that has dead jobs, in name order. It prints "replayed N dead jobs in queue Q" for each, then
"replayed N dead jobs in M queues". A queue whose dead records cannot all run again is
reported on stderr, the others are replayed all the same, and the command exits 1. With --json:
  {"count": N, "queues": [{"queue": Q, "count": N, "error": MESSAGE}...], "error": MESSAGE}
count being the total; queues lists those that had dead jobs ([] when none did); an error is
left out when there is none. If Redis fails part-way, what was replayed until then is printed,
with the failure as the top-level error, and the command exits 1.`,
		Example: `  conveyor dead replay --queue emails 01JABCDEFGHJKMNPQRSTVWXYZ0
  conveyor dead replay --queue emails --all
  conveyor dead replay --all-queues
  conveyor dead list --queue emails | awk '{print $1}' | xargs conveyor dead replay --queue emails --json`,
		Args: func(_ *cobra.Command, ids []string) error {
			switch {
			case (allQueues || queue == allQueuesName) && len(ids) > 0:
				return usageErrorf("--all-queues takes no job ids")
			case all && len(ids) > 0:
				return usageErrorf("--all takes no job ids")
			case !all && !allQueues && queue != allQueuesName && len(ids) == 0:
				return usageErrorf("want at least one job id (or --all)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, ids []string) error {
			across, err := acrossQueues(cmd, queue, allQueues)
			if err != nil {
				return err
			}
			if !across {
				if err := checkIDs(queue, ids); err != nil {
					return err
				}
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if across {
				return replayAllQueues(ctx, a, insp, asJSON)
			}
			if all {
				n, err := insp.ReplayAll(ctx, queue)
				if _, ok := deadError(ctx, insp, queue, "", err); err != nil && !ok {
					return err // Redis failed
				}
				err = plainError(err) // dead records that cannot run again
				if n == 0 && err == nil {
					if qerr := a.requireQueue(ctx, queue, nil); qerr != nil {
						return qerr
					}
				}
				if asJSON {
					r := replayReport{Count: n}
					if err != nil {
						r.Error = err.Error()
					}
					if jerr := writeJSON(a.stdout, r); jerr != nil {
						return jerr
					}
				} else {
					fmt.Fprintf(a.stdout, "replayed %s\n", plural(n, "dead job"))
				}
				return err
			}
			var r replayReport
			for _, id := range dedupe(ids) {
				if err := insp.Replay(ctx, queue, id); err != nil {
					err, ok := deadError(ctx, insp, queue, id, err)
					if !ok {
						return err
					}
					r.Failed = append(r.Failed, idError{id, err.Error()})
					if !asJSON {
						fmt.Fprintf(a.stderr, "conveyor: replay %s: %v\n", id, err)
					}
					continue
				}
				r.Replayed = append(r.Replayed, id)
				if !asJSON {
					fmt.Fprintln(a.stdout, id)
				}
			}
			r.Count = len(r.Replayed)
			if asJSON {
				if err := writeJSON(a.stdout, r); err != nil {
					return err
				}
			}
			if len(r.Failed) > 0 {
				return fmt.Errorf("%d of %d jobs not replayed", len(r.Failed), len(r.Failed)+len(r.Replayed))
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&queue, "queue", "q", pipeline.DefaultQueue, "queue of the jobs")
	cmd.Flags().BoolVar(&all, "all", false, "replay every dead job of the queue")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON object")
	addAllQueuesFlag(cmd, &allQueues, "replay every dead job")
	return cmd
}

// queueReplay is one queue's line of 'dead replay --all-queues --json'.
type queueReplay struct {
	Queue string `json:"queue"`
	Count int    `json:"count"`
	Error string `json:"error,omitempty"`
}

// replayAcrossReport is the --json output of 'dead replay --all-queues'.
type replayAcrossReport struct {
	Count  int           `json:"count"`
	Queues []queueReplay `json:"queues"`
	Error  string        `json:"error,omitempty"`
}

// replayAllQueues is 'dead replay --all-queues': ReplayAll of every known queue that has dead
// jobs (by its gauge, read once at the start), in name order.
func replayAllQueues(ctx context.Context, a *app, insp *pipeline.Inspector, asJSON bool) error {
	all, err := insp.Queues(ctx)
	if err != nil {
		return err
	}
	r := replayAcrossReport{Queues: []queueReplay{}}
	var kept int // queues whose dead records could not all run again
	var failed error
	for _, st := range all {
		if st.Dead == 0 {
			continue
		}
		n, err := insp.ReplayAll(ctx, st.Queue)
		if _, ok := deadError(ctx, insp, st.Queue, "", err); err != nil && !ok {
			failed = fmt.Errorf("queue %s: %w", st.Queue, err) // Redis failed: stop here
			r.Count += n
			r.Queues = append(r.Queues, queueReplay{Queue: st.Queue, Count: n, Error: err.Error()})
			break
		}
		qr := queueReplay{Queue: st.Queue, Count: n}
		if err != nil {
			kept++
			qr.Error = plainError(err).Error()
		}
		r.Count += n
		r.Queues = append(r.Queues, qr)
		if !asJSON {
			fmt.Fprintf(a.stdout, "replayed %s in queue %s\n", plural(n, "dead job"), st.Queue)
			if qr.Error != "" {
				fmt.Fprintf(a.stderr, "conveyor: queue %s: %s\n", st.Queue, qr.Error)
			}
		}
	}
	if failed == nil && kept > 0 {
		failed = fmt.Errorf("%s kept dead jobs that cannot run again", plural(kept, "queue"))
	}
	if asJSON {
		if failed != nil {
			r.Error = failed.Error()
		}
		if err := writeJSON(a.stdout, r); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.stdout, "replayed %s in %s\n", plural(r.Count, "dead job"), plural(len(r.Queues), "queue"))
	}
	return failed
}

// purgeReport is the --json output of 'dead purge': the keys a form has are always there (an
// empty list is [], not left out), so that 'jq .ids[]' works on every answer; the forms have
// different keys (see the command's help).
type purgeReport struct {
	Purged     *int       `json:"purged,omitempty"`
	WouldPurge *int       `json:"would_purge,omitempty"`
	IDs        *[]string  `json:"ids,omitempty"`
	Failed     *[]idError `json:"failed,omitempty"`
}

// listOf returns a pointer to s, an empty list rather than nil, for purgeReport.
func listOf[T any](s []T) *[]T {
	if s == nil {
		s = []T{}
	}
	return &s
}

func newDeadPurgeCmd(a *app) *cobra.Command {
	var queue string
	var olderThan time.Duration
	var all, dryRun, asJSON bool
	cmd := &cobra.Command{
		Use:   "purge [--queue Q] (ID... | --all [--older-than DUR]) [--dry-run] [--json]",
		Short: "Delete dead jobs for good",
		Long: `Delete dead jobs for good: the given ids, or with --all every dead job of the queue (with
--older-than, those that died at least that long ago by Redis's clock). It prints "purged N dead
jobs". A given id that is unknown or not dead is reported on stderr and left alone, the others
are deleted all the same, and the command exits 1. A malformed id is a usage error (exit 2):
nothing is deleted. Bare 'dead purge' is a usage error too: name the jobs, or say --all.

--dry-run deletes nothing: it prints the jobs that would be deleted as 'dead list' does (the
rows on stdout, the header on stderr) and then "would purge N dead jobs".

With --json it prints one JSON object, its lists [] when empty:
  ids:             {"purged": N, "ids": [ID...], "failed": [{"id": ID, "error": MESSAGE}...]}
  ids --dry-run:   {"would_purge": N, "ids": [ID...], "failed": [...]}
  --all:           {"purged": N}
  --all --dry-run: {"would_purge": N, "ids": [ID...]}`,
		Example: `  conveyor dead purge --queue emails 01JABCDEFGHJKMNPQRSTVWXYZ0
  conveyor dead purge --queue emails --all --older-than 168h --dry-run
  conveyor dead purge --queue emails --all --older-than 168h`,
		Args: func(cmd *cobra.Command, ids []string) error {
			var errs []error
			switch {
			case all && len(ids) > 0:
				errs = append(errs, usageErrorf("--all takes no job ids"))
			case !all && len(ids) == 0:
				errs = append(errs, usageErrorf("want job ids, or --all to purge every dead job"))
			}
			if cmd.Flags().Changed("older-than") {
				if len(ids) > 0 {
					errs = append(errs, usageErrorf("--older-than and job ids cannot be used together"))
				} else if !all {
					errs = append(errs, usageErrorf("--older-than needs --all"))
				}
				if olderThan < 0 {
					errs = append(errs, usageErrorf("--older-than must not be negative, not %s", olderThan))
				}
			}
			return errors.Join(errs...)
		},
		RunE: func(cmd *cobra.Command, ids []string) error {
			if err := checkIDs(queue, ids); err != nil {
				return err
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			p := purger{a: a, insp: insp, queue: queue, json: asJSON}
			ctx := cmd.Context()
			switch {
			case all && dryRun:
				return p.dryRunAll(ctx, olderThan)
			case all:
				return p.all(ctx, olderThan)
			default:
				return p.ids(ctx, dedupe(ids), dryRun)
			}
		},
	}
	f := cmd.Flags()
	f.StringVarP(&queue, "queue", "q", pipeline.DefaultQueue, "queue whose dead set to purge")
	f.BoolVar(&all, "all", false, "purge every dead job of the queue (or, with --older-than, the old ones)")
	f.DurationVar(&olderThan, "older-than", 0, "with --all: only jobs that died at least this long ago")
	f.BoolVar(&dryRun, "dry-run", false, "print what would be purged and delete nothing")
	f.BoolVar(&asJSON, "json", false, "print a JSON object")
	return cmd
}

// purger runs 'dead purge'.
type purger struct {
	a     *app
	insp  *pipeline.Inspector
	queue string
	json  bool
}

func (p purger) all(ctx context.Context, olderThan time.Duration) error {
	n, err := p.insp.PurgeAll(ctx, p.queue, olderThan)
	if err != nil && n == 0 {
		return err
	}
	if n == 0 {
		if err := p.a.requireQueue(ctx, p.queue, nil); err != nil {
			return err
		}
	}
	if p.json {
		if jerr := writeJSON(p.a.stdout, purgeReport{Purged: &n}); jerr != nil {
			return jerr
		}
	} else {
		fmt.Fprintf(p.a.stdout, "purged %s\n", plural(n, "dead job"))
	}
	return err
}

// ids purges (or with dryRun, checks) the given jobs one at a time, so that each failure is
// reported with its id.
func (p purger) ids(ctx context.Context, ids []string, dryRun bool) error {
	var done []string
	var dead []*pipeline.Job
	var failed []idError
	for _, id := range ids {
		var err error
		if dryRun {
			var j *pipeline.Job
			if j, err = p.insp.PurgeDryRun(ctx, p.queue, id); err == nil {
				dead = append(dead, j)
			}
		} else {
			_, err = p.insp.Purge(ctx, p.queue, id)
		}
		if err != nil {
			err, ok := deadError(ctx, p.insp, p.queue, id, err)
			if !ok {
				return err
			}
			failed = append(failed, idError{id, err.Error()})
			if !p.json {
				fmt.Fprintf(p.a.stderr, "conveyor: purge %s: %v\n", id, err)
			}
			continue
		}
		done = append(done, id)
	}
	n := len(done)
	var err error
	if len(failed) > 0 {
		what := "not purged"
		if dryRun {
			what = "would not be purged"
		}
		err = fmt.Errorf("%d of %d jobs %s", len(failed), len(ids), what)
	}
	if p.json {
		r := purgeReport{Purged: &n, IDs: listOf(done), Failed: listOf(failed)}
		if dryRun {
			r.Purged, r.WouldPurge = nil, &n
		}
		if jerr := writeJSON(p.a.stdout, r); jerr != nil {
			return jerr
		}
		return err
	}
	if dryRun {
		if perr := p.printWouldPurge(dead); perr != nil {
			return perr
		}
		return err
	}
	fmt.Fprintf(p.a.stdout, "purged %s\n", plural(n, "dead job"))
	return err
}

// dryRunAll lists the dead jobs that 'purge --all --older-than' would delete.
func (p purger) dryRunAll(ctx context.Context, olderThan time.Duration) error {
	if err := p.a.requireQueue(ctx, p.queue, nil); err != nil {
		return err
	}
	if p.json {
		// Ids alone: no job record is read, so that a dry run over many big dead jobs costs
		// their ids, not their payloads (as the API's dry run).
		ids, err := p.insp.PurgeAllDryRunIDs(ctx, p.queue, olderThan)
		if err != nil {
			return err
		}
		n := len(ids)
		return writeJSON(p.a.stdout, purgeReport{WouldPurge: &n, IDs: listOf(ids)})
	}
	jobs, err := p.insp.PurgeAllDryRun(ctx, p.queue, olderThan)
	if err != nil {
		return err
	}
	return p.printWouldPurge(jobs)
}

// printWouldPurge prints a dry run's jobs as 'dead list' does, then how many.
func (p purger) printWouldPurge(jobs []*pipeline.Job) error {
	if len(jobs) > 0 {
		if err := printDeadJobs(p.a.stdout, p.a.stderr, jobs, false); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(p.a.stdout, "would purge %s\n", plural(len(jobs), "dead job"))
	return err
}
