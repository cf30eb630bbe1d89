package cli

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/pipeline"
)

// newQueuesSetCmd builds 'conveyor queues set', the one verb over a queue's settings record
// (Inspector.UpdateQueue); pause, resume, limits and groups change parts of the same record.
func newQueuesSetCmd(a *app) *cobra.Command {
	var patch pipeline.QueuePatch
	var paused bool
	var concurrency, partitions, window, retries, maxWaiting, maxPerKey int
	var policy string
	var timeout time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "set QUEUE [--paused=true|false] [--concurrency N] [--partitions P] [--group-window W] [--max-retries N] [--timeout D] [--max-waiting N] [--full-policy reject|drop-oldest] [--max-waiting-per-key N] [--json]",
		Short: "Show or change a queue's settings, one record",
		Long: `Show a queue's settings, or change those the flags name; a flag left out changes nothing.
The settings are one record in Redis: the pause, the partition count, the limits, the
fair-group window and weights, and a revision that every change raises. Every worker reading
the queue learns of a change at once. The parts apply in the order partitions, concurrency,
group window, pause, each with the rules of the command it stands for ('queues create',
'limits set', 'groups set', 'pause' and 'resume'); a failure leaves the parts before it
applied. --concurrency sets the concurrency of the whole-queue limit, keeping its rate (0
removes it). --max-retries and --timeout are the defaults of the jobs published without their
own (-1 and 0 remove them); a producer reads them within 5 s. --max-waiting bounds the jobs
that wait (not running, not finished; 0 removes the bound; a partitioned queue bounds each
partition to its share, rounded up) and --full-policy says what a publish at the bound does:
reject (the default: the publish fails, HTTP 429) or drop-oldest (the oldest ready job is
canceled). --max-waiting-per-key bounds the unfinished jobs (waiting or running) of each
limit key (--limit-key), refusing a publish at it whatever the policy (0 removes it; a
partitioned queue bounds each partition to its share). --paused=true waits, like 'pause', up to 5 s for the workers to confirm, and names
those that did not on stderr. With --json it prints the settings as GET
/v1/queues/QUEUE/settings does.`,
		Example: `  conveyor queues set emails                        # show
  conveyor queues set emails --paused=true
  conveyor queues set emails --concurrency 10 --group-window 5
  conveyor queues set emails --max-retries 10 --timeout 30s
  conveyor queues set emails --max-waiting 10000 --full-policy drop-oldest
  conveyor queues set emails --max-waiting-per-key 100`,
		Args: exactlyOne("queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			queue := args[0]
			if err := checkIDs(queue, nil); err != nil {
				return err
			}
			flags := cmd.Flags()
			if flags.Changed("paused") {
				patch.Paused = &paused
			}
			if flags.Changed("concurrency") {
				patch.Concurrency = &concurrency
			}
			if flags.Changed("partitions") {
				patch.Partitions = &partitions
			}
			if flags.Changed("group-window") {
				patch.GroupWindow = &window
			}
			if flags.Changed("max-retries") {
				patch.MaxRetries = &retries
			}
			if flags.Changed("timeout") {
				patch.Timeout = &timeout
			}
			if flags.Changed("max-waiting") {
				patch.MaxWaiting = &maxWaiting
			}
			if flags.Changed("max-waiting-per-key") {
				patch.MaxWaitingPerKey = &maxPerKey
			}
			if flags.Changed("full-policy") {
				if policy != pipeline.FullReject && policy != pipeline.FullDropOldest {
					return usageErrorf("--full-policy %q: want %s or %s", policy, pipeline.FullReject, pipeline.FullDropOldest)
				}
				patch.FullPolicy = &policy
			}
			insp, err := a.inspector()
			if err != nil {
				return err
			}
			var st *pipeline.QueueSettings
			if flags.NFlag() == 0 || (flags.NFlag() == 1 && asJSON) {
				st, err = insp.QueueSettings(cmd.Context(), queue)
			} else {
				st, err = insp.UpdateQueue(cmd.Context(), queue, patch)
			}
			if err != nil {
				return a.limitQueueErr(cmd.Context(), insp, queue, err)
			}
			for _, w := range st.PauseUnconfirmed {
				fmt.Fprintf(a.stderr, "worker %s did not confirm the pause within %v\n", w, defaultPauseConfirmTimeout)
			}
			if asJSON {
				return writeJSON(a.stdout, st)
			}
			_, err = fmt.Fprint(a.stdout, settingsText(st))
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&paused, "paused", false, "pause (true) or resume (false) the queue")
	f.IntVar(&concurrency, "concurrency", 0, "the whole-queue limit's concurrency; 0 removes it")
	f.IntVar(&partitions, "partitions", 1, fmt.Sprintf("the queue's partition count, 1 to %d", maxPartitions))
	f.IntVar(&window, "group-window", 0, "the fair-group window; 0 sets it back to the default")
	f.IntVar(&retries, "max-retries", 0, "the retry count of jobs published without their own; -1 removes it")
	f.DurationVar(&timeout, "timeout", 0, "the timeout of jobs published without their own; 0 removes it")
	f.IntVar(&maxWaiting, "max-waiting", 0, "the most jobs that may wait; 0 removes the bound")
	f.IntVar(&maxPerKey, "max-waiting-per-key", 0, "the most unfinished jobs of one limit key; 0 removes the bound")
	f.StringVar(&policy, "full-policy", pipeline.FullReject, "what a publish at the bound does: reject or drop-oldest")
	f.BoolVar(&asJSON, "json", false, "print the settings as JSON")
	return cmd
}

// settingsText is st for a reader, one setting a line.
func settingsText(st *pipeline.QueueSettings) string {
	var b strings.Builder
	fmt.Fprintf(&b, "queue %s (revision %d)\n", st.Queue, st.Revision)
	fmt.Fprintf(&b, "  paused:       %t\n", st.Paused)
	fmt.Fprintf(&b, "  partitions:   %d\n", st.Partitions)
	fmt.Fprintf(&b, "  group window: %d\n", st.GroupWindow)
	for _, g := range slices.Sorted(maps.Keys(st.GroupWeights)) {
		fmt.Fprintf(&b, "  group weight: %s %d\n", g, st.GroupWeights[g])
	}
	for _, l := range st.Limits {
		fmt.Fprintf(&b, "  limit:        %s: %s\n", scopeText(l.Type, l.PerKey), limitText(l))
	}
	if st.MaxRetries != nil {
		fmt.Fprintf(&b, "  max retries:  %d\n", *st.MaxRetries)
	}
	if st.Timeout > 0 {
		fmt.Fprintf(&b, "  timeout:      %v\n", st.Timeout)
	}
	if st.MaxWaiting > 0 {
		fmt.Fprintf(&b, "  max waiting:  %d (%s)\n", st.MaxWaiting, st.FullPolicy)
	}
	if st.MaxWaitingPerKey > 0 {
		fmt.Fprintf(&b, "  max waiting per key: %d (reject)\n", st.MaxWaitingPerKey)
	}
	if len(st.Levels) > 0 {
		fmt.Fprintf(&b, "  levels:       %v\n", st.Levels)
	}
	return b.String()
}
