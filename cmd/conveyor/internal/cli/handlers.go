package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/handlers"
)

func init() { addCommand(newHandlersCmd) }

func newHandlersCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "handlers [--json]",
		Short: "List the ready handlers 'conveyor worker' runs, with their payloads",
		Long: `List the ready handlers that 'conveyor worker' runs: a table of each job type, what it does
and the payload it takes, then a publish command with an example payload for each. In the
payload shapes, UPPERCASE words stand for values and a field followed by ? is optional; the
documentation of package handlers gives each field's meaning. A payload a handler cannot use
fails the job at once, without retries.

With --json it prints a JSON array of {"type", "summary", "payload", "example", "result"},
"example" being the example payload itself (a JSON value) and the others strings. It needs no
Redis.`,
		Example: `  conveyor handlers
  conveyor handlers --json | jq -r '.[] | "\(.type) \(.example)"'`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			cat := handlers.Catalog()
			if asJSON {
				return writeJSON(a.stdout, cat)
			}
			t := newTable(a.stdout)
			fmt.Fprintln(t, "TYPE\tDOES\tPAYLOAD\tRESULT")
			for _, h := range cat {
				fmt.Fprintf(t, "%s\t%s\t%s\t%s\n", h.Type, h.Summary, h.Payload, h.Result)
			}
			if err := t.Flush(); err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, "\nExamples:")
			for _, h := range cat {
				fmt.Fprintf(a.stdout, "  conveyor publish --type %s --payload '%s'\n", h.Type, h.Example)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}
