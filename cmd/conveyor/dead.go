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
not to retry, when no handler knows its type, or when its stream entry could not be read. Dead
jobs stay until they are replayed or purged.`,
		Args: unknownSubcommand,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newDeadListCmd(a), newDeadReplayCmd(a), newDeadPurgeCmd(a))
	return cmd
}

func newDeadListCmd(a *app) *cobra.Command {
	var queue string
	var limit, offset int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--queue Q] [--limit N] [--offset N]",
		Short: "List dead jobs, newest first",
		Long:  `List dead jobs, newest first. With --json it prints a JSON array of jobs (as 'status --json').`,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 {
				return fmt.Errorf("--limit must be at least 1, not %d", limit)
			}
			if offset < 0 {
				return fmt.Errorf("--offset must not be negative, not %d", offset)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			jobs, total, err := c.Dead(cmd.Context(), queue, offset, limit)
			if err != nil {
				return err
			}
			if asJSON {
				if jobs == nil {
					jobs = []*pipeline.Job{}
				}
				return writeJSON(a.stdout, jobs)
			}
			return printDead(a.stdout, jobs, offset, total)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&queue, "queue", "q", pipeline.DefaultQueue, "queue whose dead set to list")
	f.IntVar(&limit, "limit", 50, "list at most this many jobs")
	f.IntVar(&offset, "offset", 0, "skip this many of the newest jobs")
	f.BoolVar(&asJSON, "json", false, "print a JSON array of jobs")
	return cmd
}

func printDead(w io.Writer, jobs []*pipeline.Job, offset int, total int64) error {
	if len(jobs) == 0 {
		_, err := fmt.Fprintf(w, "no dead jobs (of %d) from offset %d\n", total, offset)
		return err
	}
	t := newTable(w)
	fmt.Fprintln(t, "ID\tTYPE\tATTEMPTS\tDIED\tLAST_ERROR")
	for _, j := range jobs {
		died := "-"
		if !j.CompletedAt.IsZero() {
			died = j.CompletedAt.Local().Format("2006-01-02 15:04:05")
		}
		fmt.Fprintf(t, "%s\t%s\t%d\t%s\t%s\n", j.ID, orDash(j.Type), j.Attempt, died, oneLine(j.LastError, 80))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "jobs %d-%d of %d\n", offset+1, offset+len(jobs), total)
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
	cmd := &cobra.Command{
		Use:   "replay [--queue Q] ID...",
		Short: "Move dead jobs back into the queue for a fresh set of attempts",
		Long: `Move dead jobs back into the queue for a fresh set of attempts, printing each replayed id.
Ids that are unknown or not dead are reported on stderr, the others are replayed all the same,
and the command exits 1.`,
		Args: someArgs,
		RunE: func(cmd *cobra.Command, ids []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var failed []string
			for _, id := range ids {
				err := c.Replay(ctx, queue, id)
				switch {
				case errors.Is(err, pipeline.ErrNotFound):
					err = notFound(err, queue, id)
				case errors.Is(err, pipeline.ErrNotDead):
					if j, gerr := c.Get(ctx, queue, id); gerr == nil {
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
	return cmd
}

func newDeadPurgeCmd(a *app) *cobra.Command {
	var queue string
	var olderThan time.Duration
	cmd := &cobra.Command{
		Use:   "purge [--queue Q] [--older-than DUR]",
		Short: "Delete dead jobs and print how many were deleted",
		Long: `Delete the dead jobs of a queue (with --older-than, those that died at least that long ago)
and print how many were deleted.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan < 0 {
				return fmt.Errorf("--older-than must not be negative, not %s", olderThan)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			n, err := c.Purge(cmd.Context(), queue, olderThan)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(a.stdout, strconv.Itoa(n))
			return err
		},
	}
	cmd.Flags().StringVarP(&queue, "queue", "q", pipeline.DefaultQueue, "queue whose dead set to purge")
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "only jobs that died at least this long ago (0: all)")
	return cmd
}
