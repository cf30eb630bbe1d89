package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

func init() { addCommand(newWorkflowsCmd) }

func newWorkflowsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workflows",
		Short: "Publish workflows (DAGs of tasks) and show their progress",
		Long: `A workflow is a DAG of tasks published as one unit: each task is a job of the queue that runs
once every task it names in "after" has completed (a "finally" task: once they are final,
whatever the outcome). A task's job id is the workflow's id, a dot and the task's name, so
'conveyor status' reads it like any job. A dead task cancels the tasks that wait for it;
'conveyor dead replay' of it resumes the workflow. A batch ('conveyor batches') is a workflow
of kind batch, shown by these commands too.`,
		Example: `  conveyor workflows publish --queue builds --file pipeline.json
  conveyor workflows get --queue builds release-42
  conveyor workflows list --queue builds --limit 10 --json`,
		Args: unknownSubcommand,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newWorkflowsGetCmd(a, "workflow"), newWorkflowsListCmd(a), newWorkflowsPublishCmd(a))
	return cmd
}

// newWorkflowsGetCmd is 'workflows get', and 'batches get' with what "batch".
func newWorkflowsGetCmd(a *app, what string) *cobra.Command {
	var queue string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get [--queue Q] [--json] ID",
		Short: "Show a " + what + "'s status, its progress and each task's status",
		Long: `Show ` + what + ` ID: a header with its status (running, completed, failed or canceled) and its
progress, N/M final (completed, dead, canceled), then a table of its tasks in a topological
order: TASK, STATUS (waiting until its dependencies allow it to run; "dead" for failed),
AFTER (the tasks it waits for; "finally" when it runs whatever their outcome), ATTEMPT and
LAST_ERROR. With --json it prints the ` + what + ` as one JSON object: id, queue, name, kind,
status, created_at, finished_at (unix milliseconds, 0 when not yet), total, completed, failed,
canceled, purged and tasks [{name, job_id, type, after, finally, status, attempt, last_error,
started_at, finished_at}], as GET /v1/queues/{queue}/workflows/{id} answers. An unknown id
(or one whose retention ended) exits 1.`,
		Example:           "  conveyor " + what + "s get --queue builds release-42\n  conveyor " + what + "s get release-42 --json | jq -r .status",
		Args:              exactlyOne(what + " id"),
		ValidArgsFunction: a.completeWorkflowIDs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// The library takes "" for no id; on the command line it is a mistake.
			if err := pipeline.ValidateID(args[0]); err != nil {
				return usageError{err}
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			st, err := insp.Workflow(cmd.Context(), queue, args[0])
			if errors.Is(err, pipeline.ErrNotFound) {
				return fmt.Errorf("%s %s not found in queue %q", what, args[0], queue)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, st)
			}
			return printWorkflow(a.stdout, st)
		},
	}
	cmd.Flags().StringVarP(&queue, "queue", "q", pipeline.DefaultQueue, "queue of the "+what)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the "+what+" as one JSON object")
	return cmd
}

// progress is a workflow's "N/M final (C completed, F dead, X canceled)", with its purged
// tasks when it has any.
func progress(st *pipeline.WorkflowState) string {
	final := st.Completed + st.Failed + st.Canceled + st.Purged
	s := fmt.Sprintf("%d/%d final (%d completed, %d %s, %d canceled", final, st.Total, st.Completed, st.Failed,
		status.Dead, st.Canceled)
	if st.Purged > 0 {
		s += fmt.Sprintf(", %d purged", st.Purged)
	}
	return s + ")"
}

// printWorkflow writes a workflow's header and its tasks' table.
func printWorkflow(w io.Writer, st *pipeline.WorkflowState) error {
	name := ""
	if st.Name != "" {
		name = " " + strconv.Quote(st.Name)
	}
	fmt.Fprintf(w, "%s %s%s in queue %s: %s, %s\n", st.Kind, st.ID, name, st.Queue, st.Status, progress(st))
	now := time.Now()
	fmt.Fprintf(w, "created %s, finished %s\n", formatTime(st.CreatedAt, now), formatTime(st.FinishedAt, now))
	t := newTable(w)
	fmt.Fprintln(t, "TASK\tSTATUS\tAFTER\tATTEMPT\tLAST_ERROR")
	for _, task := range st.Tasks {
		after := strings.Join(task.After, ",")
		if task.Finally {
			after += " (finally)"
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%d\t%s\n", task.Name, task.Status.Word(), orDash(after), task.Attempt,
			orDash(oneLine(task.LastError, 80)))
	}
	return t.Flush()
}

func newWorkflowsListCmd(a *app) *cobra.Command {
	var queue string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--queue Q] [--limit N] [--json]",
		Short: "List a queue's newest workflows and batches",
		Long: `List the newest workflows and batches of a queue, newest first: a table of ID, NAME, KIND,
STATUS, PROGRESS (N/M final) and CREATED. Each queue (partition) indexes its last 10,000;
those whose retention ended are skipped. With --json it prints {"workflows": [...]}, each
as 'workflows get --json' without its tasks.`,
		Example: `  conveyor workflows list --queue builds
  conveyor workflows list --json | jq -r '.workflows[] | select(.status == "failed") | .id'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > pipeline.MaxWorkflowList {
				return usageErrorf("--limit must be 1 to %d, not %d", pipeline.MaxWorkflowList, limit)
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			list, err := insp.Workflows(cmd.Context(), queue, limit)
			if err != nil {
				return err
			}
			if list == nil {
				list = []*pipeline.WorkflowState{}
			}
			if asJSON {
				return writeJSON(a.stdout, struct {
					Workflows []*pipeline.WorkflowState `json:"workflows"`
				}{list})
			}
			if len(list) == 0 {
				_, err := fmt.Fprintf(a.stdout, "no workflows in queue %s\n", queue)
				return err
			}
			t := newTable(a.stdout)
			fmt.Fprintln(t, "ID\tNAME\tKIND\tSTATUS\tPROGRESS\tCREATED")
			for _, st := range list {
				fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%d/%d\t%s\n", st.ID, orDash(st.Name), st.Kind, st.Status,
					st.Completed+st.Failed+st.Canceled+st.Purged, st.Total, tableTime(st.CreatedAt))
			}
			return t.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVarP(&queue, "queue", "q", pipeline.DefaultQueue, "queue of the workflows")
	f.IntVar(&limit, "limit", 50, fmt.Sprintf("list at most this many (1 to %d)", pipeline.MaxWorkflowList))
	f.BoolVar(&asJSON, "json", false, `print {"workflows": [...]}`)
	return cmd
}

func newWorkflowsPublishCmd(a *app) *cobra.Command {
	return a.publishCmd("workflow", "Publish a workflow from a JSON file", `Publish the workflow of --file (- for standard input): the JSON document that POST
/v1/queues/{queue}/workflows takes, {"id"?, "name"?, "tasks": [{"name", "after"?: [names],
"finally"?: bool, "type", "payload"?, "metadata"?, "max_retries"?, "timeout"?, "retention"?}]}.
Unknown fields are refused. It prints the workflow's id, or with --json the workflow as
'workflows get --json' does (with "duplicate": true when it was published before under the
same id with the same tasks, which writes nothing, and exits 0 saying so on stderr). A body the library refuses (a cycle, an
unknown dependency, a bad name, an option a task may not take) exits 2; the same id with
other tasks exits 1.`, `  conveyor workflows publish --queue builds --file pipeline.json
  echo '{"tasks":[{"name":"a","type":"echo"},{"name":"b","type":"echo","after":["a"]}]}' | conveyor workflows publish --file -`,
		func(r io.Reader) (publishFunc, error) {
			wf, err := api.DecodeWorkflow(r)
			return func(ctx context.Context, c *pipeline.Client, queue string) (*pipeline.WorkflowState, error) {
				return c.Workflow(ctx, queue, wf)
			}, err
		})
}

// publishFunc publishes what a --file held.
type publishFunc func(ctx context.Context, c *pipeline.Client, queue string) (*pipeline.WorkflowState, error)

// publishCmd is 'workflows publish' and 'batches publish': --file decoded (before any call to
// Redis, so a bad file is a usage error whatever Redis does), published, the result printed.
func (a *app) publishCmd(what, short, long, example string, decode func(io.Reader) (publishFunc, error)) *cobra.Command {
	var queue, file string
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "publish [--queue Q] --file F|- [--json]",
		Short:   short,
		Long:    long,
		Example: example,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, done, err := a.openFile(file)
			if err != nil {
				return err
			}
			defer done()
			publish, err := decode(r)
			if err != nil {
				return fileError(file, err)
			}
			client, err := a.client()
			if err != nil {
				return err
			}
			st, err := publish(cmd.Context(), client, queue)
			if err != nil {
				return err
			}
			return a.printPublished(st, asJSON)
		},
	}
	workflowPublishFlags(cmd, &queue, &file, &asJSON, what)
	return cmd
}

// workflowPublishFlags are the flags of 'workflows publish' and 'batches publish'.
func workflowPublishFlags(cmd *cobra.Command, queue, file *string, asJSON *bool, what string) {
	f := cmd.Flags()
	f.StringVarP(queue, "queue", "q", pipeline.DefaultQueue, "queue of the "+what+"'s jobs")
	f.StringVarP(file, "file", "f", "", "the "+what+" as JSON: a file, or - for standard input")
	f.BoolVar(asJSON, "json", false, "print the "+what+" as one JSON object")
	_ = cmd.MarkFlagRequired("file")
}

// maxWorkflowFile bounds what --file reads: the API's limit of a batch body.
const maxWorkflowFile = api.DefaultMaxBatchBodyBytes

// openFile opens --file: standard input for "-". A file over maxWorkflowFile is refused
// while it is read (fileError).
func (a *app) openFile(name string) (io.Reader, func(), error) {
	if name == "-" {
		return &capReader{r: a.stdin, left: maxWorkflowFile}, func() {}, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, nil, usageErrorf("--file: %w", err)
	}
	return &capReader{r: f, left: maxWorkflowFile}, func() { f.Close() }, nil
}

// capReader fails once r has given more than left bytes, so that a huge file is refused as
// such rather than as JSON cut short.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, fmt.Errorf("it holds more than %d bytes", maxWorkflowFile)
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		return 0, fmt.Errorf("it holds more than %d bytes", maxWorkflowFile)
	}
	return n, err
}

// fileError is a usage error naming --file: the document is the command line's input.
func fileError(name string, err error) error {
	what := "--file " + name
	if name == "-" {
		what = "standard input (--file -)"
	}
	return usageErrorf("%s: %s", what, err.Error())
}

// printPublished prints a published workflow's id, or the workflow with --json; one published
// before (the same id and tasks: nothing written) is said on stderr, as 'conveyor publish' says
// a job's, and is no error.
func (a *app) printPublished(st *pipeline.WorkflowState, asJSON bool) error {
	if st.Duplicate {
		what := "tasks"
		if st.Kind == "batch" {
			what = "jobs"
		}
		fmt.Fprintf(a.stderr, "conveyor: %s %s not published again: it exists already, with the same %s and payloads\n", st.Kind, st.ID, what)
	}
	if asJSON {
		return writeJSON(a.stdout, st)
	}
	_, err := fmt.Fprintln(a.stdout, st.ID)
	return err
}

// completeWorkflowIDs offers the ids of the 100 newest workflows and batches of the --queue
// being completed (the argument of 'workflows get' and 'batches get'), with their name and
// status, or nothing when Redis does not answer within completionTimeout.
func (a *app) completeWorkflowIDs(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	const directive = cobra.ShellCompDirectiveNoFileComp
	if len(args) > 0 {
		return nil, directive
	}
	queue, _ := cmd.Flags().GetString("queue")
	insp, done, err := a.completionInspector()
	if err != nil {
		return nil, directive
	}
	defer done()
	ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
	defer cancel()
	list, err := insp.Workflows(ctx, queue, 100)
	if err != nil {
		return nil, directive
	}
	var out []cobra.Completion
	for _, st := range list {
		if strings.HasPrefix(st.ID, toComplete) {
			out = append(out, cobra.CompletionWithDesc(st.ID, st.Kind+" "+orDash(st.Name)+": "+string(st.Status)))
		}
	}
	return out, directive
}
