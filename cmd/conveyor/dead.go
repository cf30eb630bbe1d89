package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/pipeline"
)

func init() { addCommand(newDeadCmd) }

func newDeadCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dead",
		Short: "List, replay and purge jobs in a queue's dead set",
		Long: `A job lands in its queue's dead set when its retries are exhausted, when its handler says
not to retry, or when its stream entry could not be read. A job whose type no worker has a
handler for is retried like a failed attempt (a newer worker may know it) and lands here when its
retries are exhausted. Dead jobs stay until they are replayed or purged.`,
		Args: unknownSubcommand,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newDeadListCmd(a), newDeadReplayCmd(a), newDeadPurgeCmd(a))
	return cmd
}

func newDeadListCmd(a *app) *cobra.Command {
	var queue, cursor string
	var limit, offset int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--queue Q] [--limit N] [--offset N | --cursor C]",
		Short: "List dead jobs, newest first",
		Long: `List dead jobs, newest first. With --json it prints a JSON array of jobs (as 'status --json').
Without --json, the cursor of the next page is printed on stderr; --cursor starts there, which
costs less than a deep --offset (skipped jobs are read too). 'conveyor list --status failed' is
the same listing with its cursor in its JSON.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 {
				return fmt.Errorf("--limit must be at least 1, not %d", limit)
			}
			if offset < 0 {
				return fmt.Errorf("--offset must not be negative, not %d", offset)
			}
			if offset > 0 && cursor != "" {
				return usageErrorf("--offset and --cursor cannot be used together")
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, err := insp.Stats(ctx, queue)
			if err != nil {
				return err
			}
			// Skip offset jobs, then take limit, a page of at most MaxPageLimit at a time.
			var jobs []*pipeline.Job
			skip, more := offset, true
			for more && (skip > 0 || len(jobs) < limit) {
				n := limit - len(jobs)
				if skip > 0 {
					n = skip
				}
				p, err := insp.List(ctx, queue, pipeline.StatusFailed, pipeline.Page{Cursor: cursor, Limit: min(n, pipeline.MaxPageLimit)})
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
			if asJSON {
				if jobs == nil {
					jobs = []*pipeline.Job{}
				}
				return writeJSON(a.stdout, jobs)
			}
			if err := printDead(a.stdout, jobs, offset, st.Dead, cmd.Flags().Changed("cursor")); err != nil {
				return err
			}
			if more && len(jobs) > 0 {
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
	f.BoolVar(&asJSON, "json", false, "print a JSON array of jobs")
	return cmd
}

func printDead(w io.Writer, jobs []*pipeline.Job, offset int, total int64, byCursor bool) error {
	if len(jobs) == 0 {
		if byCursor {
			_, err := fmt.Fprintf(w, "no more dead jobs (of %d)\n", total)
			return err
		}
		_, err := fmt.Fprintf(w, "no dead jobs (of %d) from offset %d\n", total, offset)
		return err
	}
	t := newTable(w)
	fmt.Fprintln(t, "ID\tTYPE\tATTEMPTS\tDIED\tLAST_ERROR")
	for _, j := range jobs {
		fmt.Fprintf(t, "%s\t%s\t%d\t%s\t%s\n", j.ID, orDash(j.Type), j.Attempt, tableTime(j.CompletedAt), oneLine(j.LastError, 80))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	var err error
	if byCursor {
		_, err = fmt.Fprintf(w, "%d jobs (of %d)\n", len(jobs), total)
	} else {
		_, err = fmt.Fprintf(w, "jobs %d-%d of %d\n", offset+1, offset+len(jobs), total)
	}
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

func newDeadReplayCmd(a *app) *cobra.Command {
	var queue string
	var all bool
	cmd := &cobra.Command{
		Use:   "replay [--queue Q] ID... | --all",
		Short: "Move dead jobs back into the queue for a fresh set of attempts",
		Long: `Move dead jobs back into the queue for a fresh set of attempts, printing each replayed id.
Ids that are unknown or not dead are reported on stderr, the others are replayed all the same,
and the command exits 1.

With --all it replays every job in the dead set (those that die while it runs wait for the next
time) and prints how many; dead records that cannot run again (an unreadable entry's, which has
no type, or a job whose unique key another job holds now) stay, are reported on stderr, and the
command exits 1.`,
		Args: func(_ *cobra.Command, ids []string) error {
			switch {
			case all && len(ids) > 0:
				return usageErrorf("--all takes no job ids")
			case !all && len(ids) == 0:
				return usageErrorf("want at least one job id (or --all)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, ids []string) error {
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if all {
				n, err := insp.ReplayAll(ctx, queue)
				fmt.Fprintln(a.stdout, strconv.Itoa(n))
				return err
			}
			var failed []string
			for _, id := range ids {
				err := insp.Replay(ctx, queue, id)
				switch {
				case errors.Is(err, pipeline.ErrNotFound):
					err = notFound(err, queue, id)
				case errors.Is(err, pipeline.ErrNotDead):
					if j, gerr := insp.Get(ctx, queue, id); gerr == nil {
						err = fmt.Errorf("job %s is %s, not dead", id, j.Status)
					}
				}
				if err != nil {
					fmt.Fprintf(a.stderr, "conveyor: replay %s: %v\n", id, err)
					failed = append(failed, id)
					continue
				}
				fmt.Fprintln(a.stdout, id)
			}
			if len(failed) > 0 {
				return fmt.Errorf("%d of %d jobs not replayed", len(failed), len(ids))
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&queue, "queue", "q", pipeline.DefaultQueue, "queue of the jobs")
	cmd.Flags().BoolVar(&all, "all", false, "replay every dead job of the queue")
	return cmd
}

func newDeadPurgeCmd(a *app) *cobra.Command {
	var queue string
	var olderThan time.Duration
	cmd := &cobra.Command{
		Use:   "purge [--queue Q] [--older-than DUR | ID...]",
		Short: "Delete dead jobs and print how many were deleted",
		Long: `Delete the dead jobs of a queue (with --older-than, those that died at least that long ago;
with ids, those jobs) and print how many were deleted. A given id that is unknown or not dead is
reported on stderr and left alone, the others are deleted all the same, and the command exits 1.`,
		RunE: func(cmd *cobra.Command, ids []string) error {
			if olderThan < 0 {
				return fmt.Errorf("--older-than must not be negative, not %s", olderThan)
			}
			if len(ids) > 0 && cmd.Flags().Changed("older-than") {
				return usageErrorf("--older-than and job ids cannot be used together")
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			var n int
			if len(ids) > 0 {
				n, err = insp.Purge(cmd.Context(), queue, ids...)
			} else {
				n, err = insp.PurgeAll(cmd.Context(), queue, olderThan)
			}
			if errors.Is(err, pipeline.ErrInvalid) {
				return err // nothing was deleted
			}
			fmt.Fprintln(a.stdout, strconv.Itoa(n))
			return err
		},
	}
	cmd.Flags().StringVarP(&queue, "queue", "q", pipeline.DefaultQueue, "queue whose dead set to purge")
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "only jobs that died at least this long ago (0: all)")
	return cmd
}
