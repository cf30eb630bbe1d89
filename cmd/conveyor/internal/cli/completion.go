package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/handlers"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// finishRoot runs once every command is added to root (rootCmd calls it last): what needs the
// whole tree. It gives the root its --version flag, registers the completion of flag values
// and shows in --redis's help the URL that $CONVEYOR_REDIS_URL sets.
func finishRoot(a *app, root *cobra.Command) {
	setVersionFlag(root)
	registerCompletions(a, root)
	showRedisFromEnv(a, root)
}

// Shell completion. Cobra's 'completion' command writes the scripts (bash, zsh, fish,
// powershell); they ask the hidden '__complete' command for candidates, which calls the
// functions registered here for flag values.

// completionTimeout bounds the Redis calls of a completion: a shell waits for them.
const completionTimeout = time.Second

// registerCompletions registers the completion of flag values on every command that has the
// flag, of the queue name of 'queues delete' and of the dead job ids of 'dead replay' and
// 'dead purge'.
func registerCompletions(a *app, root *cobra.Command) {
	for _, r := range []struct {
		cmd  string // the command's name; "" for any command with the flag
		flag string
		fn   cobra.CompletionFunc
	}{
		{"", "queue", a.completeQueues},
		{"publish", "type", completeJobTypes},
		{"list", "status", completeStatuses},
		{"bench", "mode", cobra.FixedCompletions([]string{
			"live\tpublish while the worker runs", "drain\tpublish first, then time the drain",
		}, cobra.ShellCompDirectiveNoFileComp)},
	} {
		walk(root, func(c *cobra.Command) {
			if (r.cmd == "" || c.Name() == r.cmd) && c.LocalNonPersistentFlags().Lookup(r.flag) != nil {
				_ = c.RegisterFlagCompletionFunc(r.flag, r.fn) // an error: registered already
			}
		})
	}
	for name, values := range map[string][]string{"log-level": logLevels, "log-format": logFormats} {
		_ = root.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
	}
	firstQueue := func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return a.completeQueues(cmd, args, toComplete)
	}
	args := map[string]cobra.CompletionFunc{
		"conveyor queues delete": firstQueue,
		"conveyor limits set":    firstQueue,
		"conveyor limits list":   firstQueue,
		"conveyor limits delete": firstQueue,
		"conveyor dead replay":   a.completeDeadIDs,
		"conveyor dead purge":    a.completeDeadIDs,
	}
	walk(root, func(c *cobra.Command) {
		if fn, ok := args[c.CommandPath()]; ok && c.ValidArgsFunction == nil {
			c.ValidArgsFunction = fn
		}
	})
}

// walk calls fn on c and every command under it.
func walk(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		walk(sub, fn)
	}
}

// completeQueues offers the known queues (Inspector.Queues) with their gauges, from the Redis
// and prefix of the command line being completed. It offers nothing when Redis does not
// answer within completionTimeout. For a comma-separated list (worker --queue a,b) it
// completes the last name.
func (a *app) completeQueues(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	const directive = cobra.ShellCompDirectiveNoFileComp
	listed := "" // the names before the last comma
	if f := cmd.Flags().Lookup("queue"); f != nil && f.Value.Type() == "stringSlice" {
		if i := strings.LastIndexByte(toComplete, ','); i >= 0 {
			listed, toComplete = toComplete[:i+1], toComplete[i+1:]
		}
	}
	insp, done, err := a.completionInspector()
	if err != nil {
		return nil, directive
	}
	defer done()
	ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
	defer cancel()
	queues, err := insp.Queues(ctx)
	if err != nil {
		return nil, directive
	}
	var out []cobra.Completion
	for _, q := range queues {
		if strings.HasPrefix(q.Queue, toComplete) {
			out = append(out, cobra.CompletionWithDesc(listed+q.Queue, queueSummary(q)))
		}
	}
	return out, directive
}

// completionInspector returns an Inspector over a client of its own that tries once, without
// the retries of a.redis(): a shell waits for completions, and an unreachable server should
// cost one failed dial, not completionTimeout. done closes the client.
func (a *app) completionInspector() (_ *pipeline.Inspector, done func(), _ error) {
	// The same URL forms as every command (Sentinel too), with the --tls-* flags when given;
	// a TLS setting that does not check out is left to the command itself to report.
	configure := []func(opt any) error{quickTry}
	if a.tls.check(a.redisURL, a.cluster, func(flag string) string { return "--" + flag }) == nil {
		configure = append(configure, a.tls.apply)
	}
	rdb, err := dial(a.redisURL, a.cluster, configure...)
	if err != nil {
		return nil, nil, err
	}
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: a.prefix})
	return insp, func() { _ = rdb.Close() }, err
}

// quickTry makes parsed Redis options try once, within completionTimeout.
func quickTry(opt any) error {
	switch o := opt.(type) {
	case *redis.Options:
		o.MaxRetries, o.DialerRetries, o.DialTimeout = -1, 1, completionTimeout
	case *redis.ClusterOptions:
		o.MaxRetries, o.DialerRetries, o.DialTimeout = -1, 1, completionTimeout
	case *redis.FailoverOptions:
		o.MaxRetries, o.DialerRetries, o.DialTimeout = -1, 1, completionTimeout
	}
	return nil
}

// queueSummary is a queue's description in a completion: its gauges that are not zero.
func queueSummary(q *pipeline.QueueStats) string {
	var parts []string
	for _, st := range status.All() {
		if n, ok := q.Gauge(st); ok && n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, strings.ReplaceAll(st.Word(), "_", " ")))
		}
	}
	if len(parts) == 0 {
		return "empty"
	}
	return strings.Join(parts, ", ")
}

// completeJobTypes offers the ready handlers' job types with what they do.
func completeJobTypes(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var out []cobra.Completion
	for _, h := range handlers.Catalog() {
		out = append(out, cobra.CompletionWithDesc(h.Type, h.Summary))
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeStatuses offers the statuses 'list --status' takes, then the words that stand for
// them ("dead", failed's word).
func completeStatuses(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	out := make([]cobra.Completion, 0, len(listable)+1)
	var words []cobra.Completion
	for _, s := range listable {
		out = append(out, string(s))
		if w := s.Word(); w != string(s) {
			words = append(words, cobra.CompletionWithDesc(w, "the same as "+string(s)))
		}
	}
	return append(out, words...), cobra.ShellCompDirectiveNoFileComp
}

// showRedisFromEnv shows, in the help of --redis, the (redacted) URL that $CONVEYOR_REDIS_URL
// sets as its default, instead of the built-in default.
func showRedisFromEnv(a *app, root *cobra.Command) {
	f := root.PersistentFlags().Lookup("redis")
	if f == nil || a.getenv == nil {
		return
	}
	u := a.getenv(envRedisURL)
	if u == "" {
		return
	}
	const note = " (set: its value is the default)"
	f.DefValue = redactURL(u)
	if !strings.HasSuffix(f.Usage, note) {
		f.Usage += note
	}
}

// completeDeadIDs offers the ids of the 100 newest dead jobs of the --queue being completed
// (the arguments of 'dead replay' and 'dead purge'), with their type and last error.
func (a *app) completeDeadIDs(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	const directive = cobra.ShellCompDirectiveNoFileComp
	if all, _ := cmd.Flags().GetBool("all"); all {
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
	page, err := insp.List(ctx, queue, status.Failed, pipeline.Page{Limit: 100})
	if err != nil {
		return nil, directive
	}
	given := make(map[string]bool, len(args))
	for _, id := range args {
		given[id] = true
	}
	var out []cobra.Completion
	for _, j := range page.Jobs {
		if strings.HasPrefix(j.ID, toComplete) && !given[j.ID] {
			out = append(out, cobra.CompletionWithDesc(j.ID, orDash(j.Type)+": "+oneLine(j.LastError, 60)))
		}
	}
	return out, directive
}
