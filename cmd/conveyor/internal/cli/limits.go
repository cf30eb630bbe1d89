package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/pipeline"
)

func init() { addCommand(newLimitsCmd) }

func newLimitsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "Set, list and delete a queue's flow-control limits (rate and concurrency)",
		Long: `A queue's limits cap how fast its jobs start (a rate: at most N jobs start in any window of
the interval) and how many run
at once (a concurrency), over a scope: the whole queue or one job type (--type), and either all
of its jobs together or each limit key's jobs separately (--per-key: the key a job was
published with). A job is held to every limit whose scope it is in; a job over a limit waits,
neither failed nor counted as an attempt.

Limits are stored in Redis, not in worker flags: every worker obeys the same ones, and a change
applies to all of them live, without a restart. Partitioned queues cannot have limits.`,
		Example: `  conveyor limits set emails --rate 100/1s
  conveyor limits set emails --type send --per-key --concurrency 1
  conveyor limits list
  conveyor limits delete emails --type send --per-key`,
		Args: unknownSubcommand,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newLimitsSetCmd(a), newLimitsListCmd(a), newLimitsDeleteCmd(a))
	return cmd
}

// limitScope is the scope flags shared by 'limits set' and 'limits delete'.
type limitScope struct {
	typ    string
	perKey bool
}

func (s *limitScope) register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&s.typ, "type", "t", "", "limit this job type's jobs (default: every job of the queue)")
	cmd.Flags().BoolVar(&s.perKey, "per-key", false, "limit each limit key's jobs separately (jobs published without a key are not held to it)")
}

func newLimitsSetCmd(a *app) *cobra.Command {
	var scope limitScope
	var rate rateFlag
	var concurrency int
	cmd := &cobra.Command{
		Use:   "set QUEUE [--type T] [--per-key] [--rate N/INTERVAL] [--concurrency M]",
		Short: "Set a queue's limit for one scope, replacing the one there",
		Long: `Set the limit of one scope of a queue: --rate N/INTERVAL lets at most N jobs start in any
window of INTERVAL: N at once after a quiet INTERVAL, then the next once the first of them
started INTERVAL ago (100/1s, 10/1m, 5/500ms; 100/s, 10/m and 2/h mean per one second, minute,
hour), --concurrency M
lets M run at once; give either or both. The limit replaces the scope's limit as a whole: to
keep a rate while setting a concurrency, give both. Every worker applies it from its next read
of the queue's limits. The queue must exist (exit 1 otherwise) and must not be partitioned.`,
		Example: `  conveyor limits set emails --rate 100/1s
  conveyor limits set emails --type send --rate 10/m --concurrency 5
  conveyor limits set emails --type send --per-key --concurrency 1`,
		Args: exactlyOne("queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var errs []error
			if concurrency < 0 {
				errs = append(errs, usageErrorf("--concurrency must not be negative, not %d", concurrency))
			}
			if rate.n == 0 && concurrency == 0 {
				errs = append(errs, usageErrorf("give --rate, --concurrency or both (to remove a limit: 'conveyor limits delete')"))
			}
			if err := checkIDs(args[0], nil); err != nil {
				errs = append(errs, err)
			}
			if len(errs) > 0 {
				return errors.Join(errs...)
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			l := pipeline.Limit{Type: scope.typ, PerKey: scope.perKey, Rate: rate.n, Interval: rate.every, Concurrency: concurrency}
			if err := insp.SetLimit(cmd.Context(), args[0], l); err != nil {
				return a.limitQueueErr(cmd.Context(), insp, args[0], err)
			}
			_, err = fmt.Fprintf(a.stdout, "queue %s: %s: %s\n", args[0], scopeText(l.Type, l.PerKey), limitText(l))
			return err
		},
	}
	scope.register(cmd)
	cmd.Flags().Var(&rate, "rate", "at most N jobs start in any window of INTERVAL: 100/1s, 10/m, 5/500ms")
	cmd.Flags().IntVar(&concurrency, "concurrency", 0, "at most M jobs run at once")
	return cmd
}

func newLimitsListCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [QUEUE] [--json]",
		Short: "List the limits of a queue, or of every queue",
		Long: `List the limits of QUEUE, or of every known queue without one: a table of QUEUE, TYPE (* for
every type of the queue), PER_KEY, RATE and CONCURRENCY ("-" for none). With --json it prints a
JSON array of objects with the fields queue, type, per_key, rate, interval_ms and concurrency
(type "" for every type; rate and interval_ms 0 when there is no rate, concurrency 0 when there
is no concurrency limit). A queue that is not known exits 1.`,
		Example: `  conveyor limits list
  conveyor limits list emails --json | jq '.[] | select(.per_key)'`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErrorf("want at most one queue name, got %d arguments", len(args))
			}
			if len(args) == 1 {
				return checkIDs(args[0], nil)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var all map[string][]pipeline.Limit
			if len(args) == 1 {
				if err := a.requireQueue(ctx, args[0], nil); err != nil {
					return err
				}
				ls, err := insp.Limits(ctx, args[0])
				if err != nil {
					return err
				}
				all = map[string][]pipeline.Limit{args[0]: ls}
			} else if all, err = insp.AllLimits(ctx); err != nil {
				return err
			}
			rows := limitRows(all)
			if asJSON {
				return writeJSON(a.stdout, rows)
			}
			if len(rows) == 0 {
				_, err := fmt.Fprintln(a.stdout, "no limits set")
				return err
			}
			tw := newTable(a.stdout)
			fmt.Fprintln(tw, "QUEUE\tTYPE\tPER_KEY\tRATE\tCONCURRENCY")
			for _, r := range rows {
				typ, perKey, rate, conc := "*", "no", "-", "-"
				if r.Type != "" {
					typ = r.Type
				}
				if r.PerKey {
					perKey = "yes"
				}
				if r.Rate > 0 {
					rate = rateText(r.Rate, time.Duration(r.IntervalMS)*time.Millisecond)
				}
				if r.Concurrency > 0 {
					conc = strconv.Itoa(r.Concurrency)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Queue, typ, perKey, rate, conc)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}

func newLimitsDeleteCmd(a *app) *cobra.Command {
	var scope limitScope
	cmd := &cobra.Command{
		Use:   "delete QUEUE [--type T] [--per-key]",
		Short: "Delete a queue's limit of one scope",
		Long: `Delete the limit of one scope of a queue (the scope 'limits list' shows: the whole queue, or
--type T, each with or without --per-key). Jobs waiting for it run as they would without it.
When the scope has no limit there is nothing to delete: it exits 1 and says so.`,
		Example: `  conveyor limits delete emails
  conveyor limits delete emails --type send --per-key`,
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
			ctx := cmd.Context()
			deleted, err := insp.DeleteLimit(ctx, queue, scope.typ, scope.perKey)
			if err != nil {
				return err
			}
			if !deleted {
				if err := a.requireQueue(ctx, queue, nil); err != nil {
					return err
				}
				return fmt.Errorf("queue %s has no limit for %s: nothing to delete (see 'conveyor limits list %s')",
					queue, scopeText(scope.typ, scope.perKey), queue)
			}
			_, err = fmt.Fprintf(a.stdout, "queue %s: deleted the limit for %s\n", queue, scopeText(scope.typ, scope.perKey))
			return err
		},
	}
	scope.register(cmd)
	return cmd
}

// limitQueueErr turns SetLimit's ErrQueueNotFound into the message naming the known queues.
func (a *app) limitQueueErr(ctx context.Context, insp *pipeline.Inspector, queue string, err error) error {
	if !errors.Is(err, pipeline.ErrQueueNotFound) {
		return err
	}
	names, nerr := insp.QueueNames(ctx)
	if nerr != nil {
		return err
	}
	return queueNotFound(queue, a.prefix, names)
}

// limitRow is one limit in 'limits list --json' (and the HTTP API's listing has the same
// fields).
type limitRow struct {
	Queue       string `json:"queue"`
	Type        string `json:"type"`
	PerKey      bool   `json:"per_key"`
	Rate        int    `json:"rate"`
	IntervalMS  int64  `json:"interval_ms"`
	Concurrency int    `json:"concurrency"`
}

// limitRows flattens the limits by queue into rows sorted by queue (each queue's limits in the
// order Inspector.Limits gives).
func limitRows(all map[string][]pipeline.Limit) []limitRow {
	queues := make([]string, 0, len(all))
	for q := range all {
		queues = append(queues, q)
	}
	slices.Sort(queues)
	rows := []limitRow{}
	for _, q := range queues {
		for _, l := range all[q] {
			rows = append(rows, limitRow{Queue: q, Type: l.Type, PerKey: l.PerKey, Rate: l.Rate,
				IntervalMS: l.Interval.Milliseconds(), Concurrency: l.Concurrency})
		}
	}
	return rows
}

// scopeText names a limit's scope for messages.
func scopeText(typ string, perKey bool) string {
	s := "every job"
	if typ != "" {
		s = "type " + typ
	}
	if perKey {
		s += ", per limit key"
	}
	return s
}

// limitText describes a limit's rate and concurrency.
func limitText(l pipeline.Limit) string {
	var parts []string
	if l.Rate > 0 {
		parts = append(parts, "rate "+rateText(l.Rate, l.Interval))
	}
	if l.Concurrency > 0 {
		parts = append(parts, "concurrency "+strconv.Itoa(l.Concurrency))
	}
	return strings.Join(parts, ", ")
}

// rateText shows a rate as --rate takes it: 100/1s, 10/1m30s, 5/500ms.
func rateText(n int, every time.Duration) string {
	s := every.String()
	// 1m0s -> 1m, 1h0m0s -> 1h: the zero units Duration.String writes out.
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return strconv.Itoa(n) + "/" + s
}

// rateFlag is --rate N/INTERVAL: N jobs per INTERVAL, a Go duration (1s, 500ms, 1m30s) or a bare
// unit (ms, s, m, h) for one of it. A malformed value is a flag error (exit 2).
type rateFlag struct {
	n     int
	every time.Duration
}

func (r *rateFlag) String() string {
	if r.n == 0 {
		return ""
	}
	return rateText(r.n, r.every)
}

func (r *rateFlag) Type() string { return "N/INTERVAL" }

func (r *rateFlag) Set(s string) error {
	n, every, err := parseRate(s)
	if err != nil {
		return err
	}
	r.n, r.every = n, every
	return nil
}

// parseRate parses N/INTERVAL (see rateFlag).
func parseRate(s string) (int, time.Duration, error) {
	const want = "want N/INTERVAL, such as 100/1s, 10/m or 5/500ms"
	count, interval, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, 0, errors.New(want)
	}
	n, err := strconv.Atoi(count)
	if err != nil || strings.HasPrefix(count, "+") {
		return 0, 0, fmt.Errorf("%q is not a whole number of jobs: %s", count, want)
	}
	if n < 1 || n > maxLimitRate {
		return 0, 0, fmt.Errorf("%d jobs: want 1 to %d", n, maxLimitRate)
	}
	every, err := parseInterval(interval)
	if err != nil {
		return 0, 0, fmt.Errorf("interval %q: %w", interval, err)
	}
	return n, every, nil
}

// parseInterval parses a rate's interval: a Go duration, or a bare unit for one of it.
func parseInterval(s string) (time.Duration, error) {
	switch s {
	case "ms":
		return time.Millisecond, nil
	case "s":
		return time.Second, nil
	case "m":
		return time.Minute, nil
	case "h":
		return time.Hour, nil
	case "":
		return 0, errors.New("empty: want a duration such as 1s, 500ms or 1m, or a unit: ms, s, m or h")
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, errors.New("want a duration such as 1s, 500ms or 1m, or a unit: ms, s, m or h")
	case d < time.Millisecond:
		return 0, errors.New("want at least 1ms")
	case d%time.Millisecond != 0:
		return 0, errors.New("want a whole number of milliseconds")
	case d > maxLimitInterval:
		return 0, fmt.Errorf("want at most %s", rateText(1, maxLimitInterval)[2:])
	}
	return d, nil
}
