package cli

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/pipeline"
)

func init() { addCommand(newGroupsCmd) }

func newGroupsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "groups",
		Short: "Set and list a queue's fair groups (the window, groups' weights)",
		Long: `Jobs published with a group (publish --group, the HTTP field group) are served round-robin
by group within their queue: at most the queue's window of each group's jobs (times the group's
weight) are in the stream or running at once; the group's others wait, queued, in its own order.
One tenant's flood so has at most a window of jobs ahead of another tenant's next job.

The window is 20 unless set (twice a worker's default concurrency). The settings are stored in
Redis, shared by every publisher and worker, and apply from the next job that enters or leaves a
window.`,
		Example: `  conveyor groups set reports --window 10
  conveyor groups set reports --weight tenant-1=3 --weight tenant-2=2
  conveyor groups list reports`,
		Args: unknownSubcommand,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newGroupsSetCmd(a), newGroupsListCmd(a))
	return cmd
}

func newGroupsSetCmd(a *app) *cobra.Command {
	var window int
	var reset bool
	var weights []string
	cmd := &cobra.Command{
		Use:   "set QUEUE [--window N | --reset-window] [--weight GROUP=W ...]",
		Short: "Set a queue's group window and groups' weights",
		Long: `Set the window of QUEUE's fair groups (--window N: at most N of each group's jobs in the
stream or running at once; --reset-window: back to the default, 20) and groups' weights
(--weight GROUP=W, repeatable: the group's window is W times the window; W=0 sets it back to 1;
at most 1,000 groups of a queue have a weight, exit 2 past it). What is not given stays. The
queue must exist (exit 1 otherwise).`,
		Example: `  conveyor groups set reports --window 10
  conveyor groups set reports --weight tenant-1=3 --weight tenant-2=0`,
		Args: exactlyOne("queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var errs []error
			if err := checkIDs(args[0], nil); err != nil {
				errs = append(errs, err)
			}
			c := pipeline.GroupChange{Window: window, ResetWindow: reset, Weights: map[string]int{}}
			if cmd.Flags().Changed("window") && window < 1 {
				errs = append(errs, usageErrorf("--window must be at least 1, not %d", window))
			}
			if window > 0 && reset {
				errs = append(errs, usageErrorf("give --window or --reset-window, not both"))
			}
			for _, w := range weights {
				g, n, ok := strings.Cut(w, "=")
				v, err := strconv.Atoi(n)
				if !ok || g == "" || err != nil || v < 0 {
					errs = append(errs, usageErrorf("--weight %q: want GROUP=W with W a whole number, 0 or more", w))
					continue
				}
				c.Weights[g] = v
			}
			if window == 0 && !reset && len(c.Weights) == 0 && !cmd.Flags().Changed("window") {
				errs = append(errs, usageErrorf("give --window, --reset-window or --weight"))
			}
			if len(errs) > 0 {
				return errors.Join(errs...)
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			if err := insp.SetGroups(cmd.Context(), args[0], c); err != nil {
				return a.limitQueueErr(cmd.Context(), insp, args[0], err)
			}
			gs, err := insp.Groups(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "queue %s: group window %d%s\n", args[0], gs.Window, windowNote(gs))
			// Each weight given, as it now is, so that a typo'd group or a 0 that meant "back to
			// 1" shows what it did. From the change, which was applied whole: a listing holds
			// only the first groups by name (MaxGroupsListed).
			for _, g := range slices.Sorted(maps.Keys(c.Weights)) {
				w, note := c.Weights[g], ""
				if w <= 1 {
					w, note = 1, " (the default)"
				}
				fmt.Fprintf(a.stdout, "queue %s: group %s: weight %d%s\n", args[0], g, w, note)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&window, "window", 0, "at most N jobs of each group in the stream or running at once")
	cmd.Flags().BoolVar(&reset, "reset-window", false, "set the window back to the default (20)")
	cmd.Flags().StringArrayVar(&weights, "weight", nil, "GROUP=W: the group's window is W times the window (0: back to 1); repeatable")
	return cmd
}

func windowNote(gs *pipeline.Groups) string {
	if gs.WindowSet {
		return ""
	}
	return " (the default)"
}

func newGroupsListCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list QUEUE [--json]",
		Short: "List a queue's fair groups with their weights and jobs",
		Long: `List QUEUE's window and its groups that have jobs in their window or waiting, or a weight
set: a table of GROUP, WEIGHT, IN_WINDOW (in the stream, running, or deferred by a limit) and
WAITING (queued, waiting for a place): the first 1,000 by name, and a last line saying how
many there are when there are more. With --json it prints the object the HTTP API's GET
/v1/queues/{queue}/groups answers: queue, window, window_set, groups (group, weight,
in_window, waiting) and total. A queue that is not known exits 1.`,
		Example: `  conveyor groups list reports
  conveyor groups list reports --json | jq '.groups[] | select(.waiting > 0)'`,
		Args: exactlyOne("queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkIDs(args[0], nil); err != nil {
				return err
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			gs, err := insp.Groups(cmd.Context(), args[0])
			if err != nil {
				return a.limitQueueErr(cmd.Context(), insp, args[0], err)
			}
			if asJSON {
				return writeJSON(a.stdout, gs)
			}
			fmt.Fprintf(a.stdout, "queue %s: group window %d%s\n", gs.Queue, gs.Window, windowNote(gs))
			if len(gs.Groups) == 0 {
				_, err := fmt.Fprintln(a.stdout, "no groups")
				return err
			}
			tw := newTable(a.stdout)
			fmt.Fprintln(tw, "GROUP\tWEIGHT\tIN_WINDOW\tWAITING")
			for _, g := range gs.Groups {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", g.Group, g.Weight, g.InWindow, g.Waiting)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if gs.Total > len(gs.Groups) {
				_, err := fmt.Fprintf(a.stdout, "(the first %d of %d groups, by name)\n", len(gs.Groups), gs.Total)
				return err
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON object")
	return cmd
}
