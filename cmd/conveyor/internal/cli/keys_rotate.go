package cli

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/outbox"
	"github.com/conveyorq/conveyor/pipeline"
)

// keysRotateOutput is what 'conveyor keys rotate --json' prints: the Redis report, and the
// outbox's when --postgres was given.
type keysRotateOutput struct {
	pipeline.RotateReport
	Outbox *outbox.RotateReport `json:"outbox,omitempty"`
}

// newKeysRotateCmd builds 'conveyor keys rotate'. keys returns the keyring to rotate to (the
// key file or environment the command was given); it is called once the flags are parsed.
func newKeysRotateCmd(a *app, keys func(cmd *cobra.Command) (*keyring.Keyring, error)) *cobra.Command {
	var (
		queue, postgres string
		batch           int
		asJSON          bool
	)
	cmd := &cobra.Command{
		Use:   "rotate [--queue Q] [--batch N] [--postgres URL] [--json]",
		Short: "Re-seal stored payloads and results under the newest key",
		Long: `Re-seal what is stored under the keyring's newest key (its first line): the payloads and
results of scheduled, queued, waiting, dead, completed and canceled jobs, the results that
workflows and batches keep for their tasks, and the log lines of those jobs' attempts (place
"logs", one value an attempt), of every known queue or of --queue's, in batches of
--batch jobs a round trip. A value under an older listed key is opened and sealed again; a plain
value (stored before encryption was turned on) is sealed; a value under the newest key is left
alone. Each write is a compare-and-set: a job that moved on meanwhile is skipped, never
clobbered. A queued job's stream entry no worker has read is replaced by a new one at the back
of its stream. Jobs a worker holds are left alone: their outcome is written by the worker.
With --postgres it also re-seals the rows of the outbox table (` + outbox.Table + `), in their own
transactions, skipping the rows the relay holds.

Run it after the new key is listed first on every process; rerun it until nothing is left
(moved on or running): a rerun only reads what is current. Then the old key can go. It exits 1
when a value could not be opened (a key the keyring lacks: keep it listed until it is
re-sealed). With --json it prints the report: {"key":..,"queues":[..],"places":{"queued":
{"resealed":..,"sealed":..,"current":..,"moved_on":..,"running":..,"gone":..,"failed":..,
"missing_keys":[..]},..},"total":{..},"outbox":{..}}.`,
		Example: `  conveyor keys rotate --keys /etc/conveyor/keys
  conveyor keys rotate --keys /etc/conveyor/keys --queue emails --batch 500 --json
  conveyor keys rotate --keys /etc/conveyor/keys --postgres postgres://app@db/shop`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if batch < 1 || batch > pipeline.MaxRotateBatch {
				return usageErrorf("--batch %d is outside 1..%d", batch, pipeline.MaxRotateBatch)
			}
			if queue != "" {
				if err := checkIDs(queue, nil); err != nil {
					return err
				}
			}
			k, err := keys(cmd)
			if err != nil {
				return err
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			rep, err := insp.RotateKeys(cmd.Context(), queue, k, pipeline.RotateOptions{Batch: batch})
			if errors.Is(err, pipeline.ErrQueueNotFound) {
				names, nerr := insp.QueueNames(cmd.Context())
				if nerr != nil {
					return err
				}
				return queueNotFound(queue, a.prefix, names)
			}
			if err != nil {
				return err
			}
			out := keysRotateOutput{RotateReport: rep}
			if postgres != "" {
				cfg, err := pgx.ParseConfig(postgres)
				if err != nil {
					return usageErrorf("--postgres: %v", err)
				}
				db := stdlib.OpenDB(*cfg)
				defer func() { _ = db.Close() }()
				orep, err := outbox.Rotate(cmd.Context(), db, k, batch)
				if err != nil {
					return err
				}
				out.Outbox = &orep
			}
			if asJSON {
				if err := writeJSON(a.stdout, out); err != nil {
					return err
				}
			} else if err := printRotation(a, out); err != nil {
				return err
			}
			failed, missing := rep.Total.Failed, rep.Total.MissingKeys
			if out.Outbox != nil {
				failed += out.Outbox.Failed
				missing = append(missing, out.Outbox.MissingKeys...)
			}
			if failed > 0 {
				why := "damaged"
				if len(missing) > 0 {
					why = "sealed under keys the keyring lacks: " + strings.Join(dedup(missing), ", ")
				}
				return fmt.Errorf("%d values could not be opened (%s); keep their keys listed until they are re-sealed", failed, why)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&queue, "queue", "", "the queue to go through (default every known queue)")
	f.IntVar(&batch, "batch", pipeline.DefaultRotateBatch, fmt.Sprintf("jobs read (and re-sealed in one call) a round trip, 1..%d", pipeline.MaxRotateBatch))
	f.StringVar(&postgres, "postgres", "", "PostgreSQL URL of the outbox table whose rows to re-seal too (default none)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// printRotation prints a rotation's report as a table, a row a place.
func printRotation(a *app, out keysRotateOutput) error {
	w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "PLACE\tRESEALED\tSEALED\tCURRENT\tMOVED ON\tRUNNING\tGONE\tFAILED\tMISSING KEYS\n")
	row := func(place string, c pipeline.RotateCounts) {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", place, c.Resealed, c.Sealed, c.Current, c.MovedOn, c.Running,
			c.Gone, c.Failed, strings.Join(c.MissingKeys, ","))
	}
	for _, p := range []string{pipeline.RotateScheduled, pipeline.RotateQueued, pipeline.RotateWaiting, pipeline.RotateDead,
		pipeline.RotateCompleted, pipeline.RotateCanceled, pipeline.RotateWorkflowResults, pipeline.RotateLogs} {
		if c := out.Places[p]; c != nil {
			row(p, *c)
		}
	}
	if o := out.Outbox; o != nil {
		row("outbox", pipeline.RotateCounts{Resealed: o.Resealed, Sealed: o.Sealed, Current: o.Current, Failed: o.Failed,
			MissingKeys: o.MissingKeys})
	}
	row("total", out.Total)
	if err := w.Flush(); err != nil {
		return err
	}
	changed, left := out.Total.Changed(), out.Total.Left()
	if o := out.Outbox; o != nil {
		changed += o.Resealed + o.Sealed
	}
	_, err := fmt.Fprintf(a.stdout, "%s now under key %s in %s", plural(changed, "value"), out.Key, plural(len(out.Queues), "queue"))
	if err == nil && left > out.Total.Failed {
		_, err = fmt.Fprintf(a.stdout, "; %d moved on or running: run it again for them", left-out.Total.Failed)
	}
	if err == nil {
		_, err = fmt.Fprintln(a.stdout)
	}
	return err
}

// dedup is s sorted without repeats.
func dedup(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

func init() {
	keysSubcommands = append(keysSubcommands, func(a *app) *cobra.Command {
		return newKeysRotateCmd(a, func(*cobra.Command) (*keyring.Keyring, error) {
			if a.keys == nil {
				return nil, usageErrorf("no keys: give --keys FILE or set $%s (the newest key first)", envKeys)
			}
			return a.keys, nil
		})
	})
}
