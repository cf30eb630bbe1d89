package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/pipeline"
)

func init() { addCommand(newWorkersCmd) }

func newWorkersCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "workers [--json]",
		Short: "List the live workers: host, pid, version, queues and the jobs they run",
		Long: `List the live workers, from the heartbeat record each running worker writes every few seconds
(--heartbeat-interval of 'conveyor worker', 5s): a table of NAME (the consumer name a job's
worker shows), HOST, PID, VERSION, QUEUES, RUNNING (jobs running now of the concurrency),
STARTED and LAST_BEAT (how long ago Redis received the last record, by Redis's clock), then
the running jobs, longest-running first (at most 100 a worker; the rest counted). A worker
drops out three beats after its last one (killed, frozen, cut off from Redis), and at once when
it stops gracefully. A worker started with --heartbeat-interval 0 is not listed.

With --json it prints {"workers": [{"name", "host", "pid", "version", "queues", "concurrency",
"running": [{"id", "queue", "type", "started_at"}], "running_more", "started_at",
"heartbeat_at", "heartbeat_age_ms", "heartbeat_interval_ms"}]}, times in unix milliseconds
(the worker host's clock). No live worker prints nothing (a note on stderr) and exits 0.`,
		Example: `  conveyor workers
  conveyor workers --json | jq -r '.workers[] | "\(.name) \(.running | length)"'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			ws, err := insp.Workers(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, struct {
					Workers []pipeline.WorkerInfo `json:"workers"`
				}{ws})
			}
			if len(ws) == 0 {
				_, err := fmt.Fprintln(a.stderr, "no live workers (none has written a heartbeat in the last three beats)")
				return err
			}
			return printWorkers(a.stdout, ws, time.Now())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"workers": [...]}`)
	return cmd
}

// printWorkers writes the workers' table, then their running jobs.
func printWorkers(w io.Writer, ws []pipeline.WorkerInfo, now time.Time) error {
	t := newTable(w)
	fmt.Fprintln(t, "NAME\tHOST\tPID\tVERSION\tQUEUES\tRUNNING\tSTARTED\tLAST_BEAT")
	running := 0
	for _, wk := range ws {
		n := len(wk.Running) + wk.RunningMore
		running += n
		fmt.Fprintf(t, "%s\t%s\t%d\t%s\t%s\t%d/%d\t%s\t%s ago\n", wk.Name, orDash(wk.Host), wk.PID, orDash(wk.Version),
			strings.Join(wk.Queues, ","), n, wk.Concurrency, formatTime(wk.Started, now), wk.HeartbeatAge.Round(time.Millisecond))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	if running == 0 {
		return nil
	}
	fmt.Fprintln(w)
	t = newTable(w)
	fmt.Fprintln(t, "WORKER\tQUEUE\tJOB\tTYPE\tSTARTED")
	for _, wk := range ws {
		for _, r := range wk.Running {
			fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\n", wk.Name, r.Queue, r.ID, r.Type, formatTime(r.Started, now))
		}
		if wk.RunningMore > 0 {
			fmt.Fprintf(t, "%s\t\t(%d more)\t\t\n", wk.Name, wk.RunningMore)
		}
	}
	return t.Flush()
}
