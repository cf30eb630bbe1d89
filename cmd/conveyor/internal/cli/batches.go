package cli

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/pipeline"
)

func init() { addCommand(newBatchesCmd) }

func newBatchesCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "batches",
		Short: "Publish batches of jobs with a callback, and show their progress",
		Long: `A batch is a group of jobs published as one unit, with an optional callback job that runs
once, when every job of the batch is final (completed, dead or canceled); its handler reads
their counts and results (Job.Dependencies). A batch is a workflow of kind batch: its jobs
are tasks named 1, 2, ... and its callback is the task "callback", so 'conveyor workflows'
shows it too.`,
		Example: `  conveyor batches publish --queue emails --file newsletter.json
  conveyor batches get --queue emails newsletter-7`,
		Args: unknownSubcommand,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newBatchesPublishCmd(a), newWorkflowsGetCmd(a, "batch"))
	return cmd
}

func newBatchesPublishCmd(a *app) *cobra.Command {
	return a.publishCmd("batch", "Publish a batch from a JSON file", `Publish the batch of --file (- for standard input): the JSON document that POST
/v1/queues/{queue}/batches takes, {"id"?, "name"?, "jobs": [job...], "callback"?: job}, each
job with the fields of POST /v1/queues/{queue}/jobs except those that choose when or where it
runs (id, delay, run_at, unique, debounce, group, priority, limit_key), which are refused.
Unknown fields are refused. It prints the batch's id, or with --json the batch as 'batches get
--json' does. Exit codes as 'workflows publish'.`, `  conveyor batches publish --queue emails --file newsletter.json
  echo '{"jobs":[{"type":"echo","payload":1},{"type":"echo","payload":2}],"callback":{"type":"echo"}}' | conveyor batches publish --file -`,
		func(r io.Reader) (publishFunc, error) {
			b, err := api.DecodeBatch(r)
			return func(ctx context.Context, c *pipeline.Client, queue string) (*pipeline.WorkflowState, error) {
				return c.Batch(ctx, queue, b)
			}, err
		})
}
