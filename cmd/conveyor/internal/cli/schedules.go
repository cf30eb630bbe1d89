package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/keyspace"
	"github.com/conveyorq/conveyor/pipeline"
)

func init() { addCommand(newSchedulesCmd) }

func newSchedulesCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedules",
		Short: "Create, list, pause, resume and delete periodic schedules",
		Long: `A periodic schedule enqueues one job of a type and payload into a queue at every tick of a
spec: a cron expression of 5 fields (minute first) or 6 (second first) in robfig/cron's syntax,
read in UTC unless it starts with CRON_TZ=Zone; a descriptor such as @hourly or @daily; or
"@every D" (whole seconds, at least 1s, ticking at the multiples of D since the Unix epoch).

Schedules are stored in Redis: every worker runs them, so one created here needs no deploy, and
each tick makes exactly one job (id cron:NAME:UNIX_SECONDS) however many workers run. Workers
also store the schedules they were started with (--cron, or WorkerConfig.Periodic in code).`,
		Example: `  conveyor schedules create nightly --spec '0 0 3 * * *' --queue reports --type report --payload '{"kind":"daily"}'
  conveyor schedules create heartbeat --spec '@every 30s' --type echo
  conveyor schedules list
  conveyor schedules pause nightly
  conveyor schedules delete nightly`,
		Args: unknownSubcommand,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newSchedulesCreateCmd(a), newSchedulesListCmd(a), newSchedulesDeleteCmd(a),
		newSchedulesPauseCmd(a, true), newSchedulesPauseCmd(a, false))
	return cmd
}

func newSchedulesCreateCmd(a *app) *cobra.Command {
	var spec, queue, typ, payload, missed string
	cmd := &cobra.Command{
		Use:   "create NAME --spec SPEC --type T [--queue Q] [--payload JSON] [--missed skip|once]",
		Short: "Store a schedule, replacing one of its name",
		Long: `Store schedule NAME (1 to 64 characters from letters, digits, '.', '_' and '-'). Workers run it
from their next read of the schedules, within a second; its first tick is the first after now.
A schedule stored again under its name is replaced, keeping its last run and its pause.
--missed says what becomes of ticks missed while no worker ran (more than a minute late): skip
(the default) drops them, once runs them as one job.`,
		Example: `  conveyor schedules create nightly --spec '0 0 3 * * *' --queue reports --type report
  conveyor schedules create standup --spec 'CRON_TZ=Europe/Berlin 0 0 9 * * 1-5' --type http --payload @standup.json --missed once`,
		Args: exactlyOne("schedule name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var errs []error
			if err := keyspace.ValidateSchedule(args[0]); err != nil {
				errs = append(errs, usageError{err})
			}
			if spec == "" {
				errs = append(errs, usageErrorf("--spec is required"))
			}
			if typ == "" {
				errs = append(errs, usageErrorf("--type is required"))
			}
			if missed != string(pipeline.MissedSkip) && missed != string(pipeline.MissedRunOnce) {
				errs = append(errs, usageErrorf("--missed must be skip or once, not %q", missed))
			}
			var body []byte
			if payload != "" {
				var err error
				if body, err = readPayload(payload, a.stdin, maxPayloadBytes); err != nil {
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
			p := pipeline.Periodic{Name: args[0], Spec: spec, Queue: queue, Type: typ, Payload: body, Missed: pipeline.MissedPolicy(missed)}
			if err := insp.CreateSchedule(cmd.Context(), p); err != nil {
				return err
			}
			s, err := insp.GetSchedule(cmd.Context(), p.Name)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "schedule %s: %s -> queue %s, type %s; next run %s\n", s.Name, s.Spec, s.Queue, s.Type, timeText(s.NextRunAt))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&spec, "spec", "", "when ticks fall: a cron expression (5 or 6 fields, CRON_TZ=Zone first for a time zone), @hourly, @daily, or @every D")
	f.StringVarP(&queue, "queue", "q", pipeline.DefaultQueue, "queue the jobs go to")
	f.StringVarP(&typ, "type", "t", "", "the jobs' type")
	f.StringVar(&payload, "payload", "", "the jobs' payload: JSON, @file, or @- for standard input (default empty)")
	f.StringVar(&missed, "missed", string(pipeline.MissedSkip), "ticks missed while no worker ran: skip, or once (one job for all)")
	return cmd
}

// timeText shows a time in the list: UTC to the second, or "-".
func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func newSchedulesListCmd(a *app) *cobra.Command {
	var asJSON bool
	var limit int
	var cursor string
	cmd := &cobra.Command{
		Use:   "list [--limit N] [--cursor C] [--json]",
		Short: "List the schedules with their last and next runs",
		Long: `List the stored schedules by name: a table of NAME, SPEC, QUEUE, TYPE, MISSED, STATE (active or
paused), LAST_RUN (when the last job was enqueued), LAST_JOB (its id) and NEXT_RUN ("-" for none;
a paused schedule has none). With --json it prints a JSON array of objects with the fields name,
spec, queue, type, payload, missed, source (api or worker), paused, last_run_at, last_tick,
last_job and next_run_at (times in RFC 3339, null for none).

Without --limit or --cursor it lists them all, a page at a time. With either it prints one page
of at most --limit schedules (1 to 1000, default 100) and, on stderr, the cursor of the next page
("next page: --cursor C"), nothing when the page is the last; --json then prints
{"schedules": [...], "next": "..."}, next "" at the end.`,
		Example: `  conveyor schedules list
  conveyor schedules list --json | jq '.[] | select(.paused)'
  conveyor schedules list --limit 50 --cursor nightly`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			paged := cmd.Flags().Changed("limit") || cmd.Flags().Changed("cursor")
			if paged && (limit < 1 || limit > maxPageLimit) {
				return usageErrorf("--limit must be 1 to %d, not %d", maxPageLimit, limit)
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			var list []pipeline.Schedule
			next := ""
			if paged {
				p, err := insp.SchedulesPage(cmd.Context(), pipeline.Page{Cursor: cursor, Limit: limit})
				if errors.Is(err, pipeline.ErrInvalid) {
					return usageError{err} // a bad --cursor
				}
				if err != nil {
					return err
				}
				list, next = p.Schedules, p.Next
			} else if list, err = insp.Schedules(cmd.Context()); err != nil {
				return err
			}
			if list == nil {
				list = []pipeline.Schedule{}
			}
			if next != "" {
				defer fmt.Fprintf(a.stderr, "next page: --cursor %s\n", next)
			}
			if asJSON {
				if paged {
					return writeJSON(a.stdout, pipeline.SchedulePage{Schedules: list, Next: next})
				}
				return writeJSON(a.stdout, list)
			}
			if len(list) == 0 {
				_, err := fmt.Fprintln(a.stdout, "no schedules")
				return err
			}
			tw := newTable(a.stdout)
			fmt.Fprintln(tw, "NAME\tSPEC\tQUEUE\tTYPE\tMISSED\tSTATE\tLAST_RUN\tLAST_JOB\tNEXT_RUN")
			for _, s := range list {
				state, job := "active", s.LastJob
				if s.Paused {
					state = "paused"
				}
				if job == "" {
					job = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Spec, s.Queue, s.Type, s.Missed, state,
					timeText(s.LastRunAt), job, timeText(s.NextRunAt))
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print a JSON array (with --limit or --cursor: {\"schedules\": [...], \"next\": \"...\"})")
	f.IntVar(&limit, "limit", defaultPageLimit, "print one page of at most this many schedules (1 to 1000)")
	f.StringVar(&cursor, "cursor", "", "print the page after the one that printed this cursor")
	return cmd
}

func newSchedulesDeleteCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a schedule (the jobs it enqueued stay)",
		Long: `Delete schedule NAME, its last run and its pause; the jobs it enqueued stay. A schedule that is
not stored exits 1. A worker started with the schedule (--cron, or in code) stores it again.`,
		Example:           `  conveyor schedules delete nightly`,
		Args:              exactlyOne("schedule name"),
		ValidArgsFunction: a.completeSchedules,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := keyspace.ValidateSchedule(args[0]); err != nil {
				return usageError{err}
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			if err := insp.DeleteSchedule(cmd.Context(), args[0]); err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "schedule %s: deleted\n", args[0])
			return err
		},
	}
}

func newSchedulesPauseCmd(a *app, pause bool) *cobra.Command {
	use, short, long := "pause", "Pause a schedule: no job is enqueued until it is resumed",
		`Pause schedule NAME: workers enqueue none of its ticks until 'conveyor schedules resume'. A
worker storing the schedule again at start does not resume it. A schedule that is not stored
exits 1.`
	if !pause {
		use, short, long = "resume", "Resume a paused schedule from its next tick",
			`Resume schedule NAME: its next job is its first tick after now; the ticks of the pause are
dropped, whatever --missed says. A schedule that is not stored exits 1.`
	}
	return &cobra.Command{
		Use:               use + " NAME",
		Short:             short,
		Long:              long,
		Example:           "  conveyor schedules " + use + " nightly",
		Args:              exactlyOne("schedule name"),
		ValidArgsFunction: a.completeSchedules,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := keyspace.ValidateSchedule(args[0]); err != nil {
				return usageError{err}
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			f, done := insp.PauseSchedule, "paused"
			if !pause {
				f, done = insp.ResumeSchedule, "resumed"
			}
			if err := f(cmd.Context(), args[0]); err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "schedule %s: %s\n", args[0], done)
			return err
		},
	}
}

// completeSchedules offers the stored schedules' names (the argument of 'schedules delete',
// 'pause' and 'resume'), each with its spec and state, or nothing when Redis does not answer
// within completionTimeout.
func (a *app) completeSchedules(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	const directive = cobra.ShellCompDirectiveNoFileComp
	if len(args) > 0 {
		return nil, directive
	}
	insp, done, err := a.completionInspector()
	if err != nil {
		return nil, directive
	}
	defer done()
	ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
	defer cancel()
	list, err := insp.Schedules(ctx)
	if err != nil {
		return nil, directive
	}
	var out []cobra.Completion
	for _, sc := range list {
		if strings.HasPrefix(sc.Name, toComplete) {
			desc := sc.Spec + " -> " + sc.Queue
			if sc.Paused {
				desc += " (paused)"
			}
			out = append(out, cobra.CompletionWithDesc(sc.Name, desc))
		}
	}
	return out, directive
}

// parseCronFlag reads a worker's --cron 'SPEC TYPE [PAYLOAD]' into a schedule of queue: SPEC
// is "@every D", a descriptor (@daily), or a cron expression of 6 fields (seconds first) or 5,
// optionally after CRON_TZ=Zone; then the job type; then, to the end, the payload (JSON). The
// schedule's name is the type and a hash of the whole flag and the queue, so every worker
// started with the same flag stores the same schedule.
func parseCronFlag(v, queue string) (pipeline.Periodic, error) {
	words := strings.Fields(v)
	specWords := 0
	i := 0
	if len(words) > 0 && (strings.HasPrefix(words[0], "CRON_TZ=") || strings.HasPrefix(words[0], "TZ=")) {
		i = 1
	}
	switch {
	case len(words) > i && words[i] == "@every":
		specWords = i + 2
	case len(words) > i && strings.HasPrefix(words[i], "@"):
		specWords = i + 1
	default:
		// Six fields when they read as a spec and a type follows, else five.
		specWords = i + 5
		if len(words) > i+6 {
			if _, err := pipeline.ParseSpec(strings.Join(words[:i+6], " ")); err == nil {
				specWords = i + 6
			}
		}
	}
	if len(words) <= specWords {
		return pipeline.Periodic{}, fmt.Errorf("--cron %q: want 'SPEC TYPE [PAYLOAD]', such as '@every 1m echo {}' or '0 0 3 * * * report'", v)
	}
	spec := strings.Join(words[:specWords], " ")
	if _, err := pipeline.ParseSpec(spec); err != nil {
		return pipeline.Periodic{}, fmt.Errorf("--cron %q: %s", v, strings.TrimPrefix(err.Error(), pipeline.ErrInvalid.Error()+": "))
	}
	typ := words[specWords]
	// The payload is the rest of the value as typed, spaces and all.
	rest := strings.TrimSpace(v)
	for _, w := range words[:specWords+1] {
		rest = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(rest), w))
	}
	var payload []byte
	if rest != "" {
		if !json.Valid([]byte(rest)) {
			return pipeline.Periodic{}, fmt.Errorf("--cron %q: the payload %q is not valid JSON", v, rest)
		}
		payload = []byte(rest)
	}
	h := fnv.New32a()
	h.Write([]byte(queue + "\x00" + strings.Join(words, " ")))
	name := fmt.Sprintf("cron-%s-%08x", scheduleNamePart(typ), h.Sum32())
	return pipeline.Periodic{Name: name, Spec: spec, Queue: queue, Type: typ, Payload: payload}, nil
}

// scheduleNamePart is typ in the characters a schedule's name allows, shortened to leave room
// for the rest of a --cron schedule's name.
func scheduleNamePart(typ string) string {
	b := []byte(typ)
	for k, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[k] = '-'
		}
	}
	if len(b) > keyspace.MaxScheduleLen-len("cron--00000000") {
		b = b[:keyspace.MaxScheduleLen-len("cron--00000000")]
	}
	return string(b)
}
