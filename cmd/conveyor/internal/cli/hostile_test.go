package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/hostile"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// hostileCLI is a private server with a queued job, and a run of one command line against it
// that must be refused as a usage error (exit 2) naming the problem and write nothing.
func hostileCLI(t *testing.T) func(t *testing.T, wants []string, args ...string) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	_, err = c.Enqueue(t.Context(), "hostile", pipeline.Task{Type: "echo"}, pipeline.WithID("queued"))
	require.NoError(t, err)
	return func(t *testing.T, wants []string, args ...string) {
		t.Helper()
		hostile.NothingWritten(t, rdb, func() {
			stdout, stderr, code := runInProcess(t, "", append([]string{"--redis", srv.URL()}, args...)...)
			require.Equal(t, 2, code, "exit code; stderr:\n%s", stderr)
			require.Empty(t, stdout)
			for _, w := range wants {
				require.Contains(t, strings.ToLower(stderr), strings.ToLower(w))
			}
		})
	}
}

// TestHostileCLIPublish runs the shared table of hostile publishes through `conveyor publish`.
func TestHostileCLIPublish(t *testing.T) {
	t.Parallel()
	refused := hostileCLI(t)
	for _, tc := range hostile.Cases("hostile") {
		t.Run(tc.Name, func(t *testing.T) {
			tc.SkipAt(t, hostile.CLI)
			refused(t, tc.Wants(hostile.CLI), tc.Job.CLIArgs()...)
		})
	}
}

// TestHostileCLINames passes every hostile queue name and job id to each command that takes
// one.
func TestHostileCLINames(t *testing.T) {
	t.Parallel()
	refused := hostileCLI(t)
	wfFile := writeFile(t, `{"tasks":[{"name":"a","type":"echo"}]}`)
	byQueue := map[string]func(q string) []string{
		"status":        func(q string) []string { return []string{"status", "--queue", q, "queued"} },
		"cancel":        func(q string) []string { return []string{"cancel", "--queue", q, "queued"} },
		"stats":         func(q string) []string { return []string{"stats", "--queue", q} },
		"list":          func(q string) []string { return []string{"list", "--queue", q, "--status", "queued"} },
		"dead list":     func(q string) []string { return []string{"dead", "list", "--queue", q} },
		"dead replay":   func(q string) []string { return []string{"dead", "replay", "--queue", q, "queued"} },
		"dead purge":    func(q string) []string { return []string{"dead", "purge", "--queue", q, "--all"} },
		"queues delete": func(q string) []string { return []string{"queues", "delete", "--force", q} },
		"queues create": func(q string) []string { return []string{"queues", "create", q, "--partitions", "2"} },
		"pause":         func(q string) []string { return []string{"pause", q} },
		"resume":        func(q string) []string { return []string{"resume", q} },
		"workflows get": func(q string) []string { return []string{"workflows", "get", "--queue", q, "wf"} },
		"workflows ls":  func(q string) []string { return []string{"workflows", "list", "--queue", q} },
		"workflows pub": func(q string) []string { return []string{"workflows", "publish", "--queue", q, "--file", wfFile} },
		"batches get":   func(q string) []string { return []string{"batches", "get", "--queue", q, "b"} },
	}
	byID := map[string]func(id string) []string{
		"status":      func(id string) []string { return []string{"status", "--queue", "hostile", id} },
		"status find": func(id string) []string { return []string{"status", id} },
		"cancel":      func(id string) []string { return []string{"cancel", "--queue", "hostile", id} },
		"cancel find": func(id string) []string { return []string{"cancel", id} },
		"dead replay": func(id string) []string { return []string{"dead", "replay", "--queue", "hostile", id} },
		"dead purge":  func(id string) []string { return []string{"dead", "purge", "--queue", "hostile", "queued", id} },
		"workflow":    func(id string) []string { return []string{"workflows", "get", "--queue", "hostile", id} },
	}
	for _, n := range hostile.BadQueues() {
		for name, args := range byQueue {
			t.Run("Queue/"+n.Name+"/"+name, func(t *testing.T) {
				if n.Value == "" && (name == "status" || name == "cancel") {
					t.Skip("an empty --queue means every known queue")
				}
				refused(t, []string{"queue name", n.Want}, args(n.Value)...)
			})
		}
	}
	for _, n := range hostile.BadIDs() {
		for name, args := range byID {
			t.Run("ID/"+n.Name+"/"+name, func(t *testing.T) {
				refused(t, []string{"job id", n.Want}, args(n.Value)...)
			})
		}
	}
}

// TestHostileCLIExtremes publishes the valid jobs at every limit: each is accepted.
func TestHostileCLIExtremes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, e := range hostile.Extremes("hostile") {
		t.Run(e.Name, func(t *testing.T) {
			e.SkipAt(t, hostile.CLI)
			stdout, stderr, code := runInProcess(t, "", append([]string{"--redis", srv.URL()}, e.Job.CLIArgs()...)...)
			require.Equal(t, 0, code, "stderr:\n%s", stderr)
			require.NotEmpty(t, stdout)
		})
	}
}
