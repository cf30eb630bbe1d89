package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/pipeline"
)

func init() { addCommand(newPublishCmd) }

// publishChunk is how many jobs one EnqueueBatch call of `publish --count` carries.
const publishChunk = 1000

// defaultUniqueTTL is how long --unique holds its key when --unique-ttl is not given.
const defaultUniqueTTL = time.Hour

type publishFlags struct {
	queue      string
	jobType    string
	payload    string
	delay      time.Duration
	maxRetries int
	id         string
	count      int
	timeout    time.Duration
	unique     string
	uniqueTTL  time.Duration
	limitKey   string
	group      string
	priority   int
	meta       []string
	// waitReplicas and waitTimeout are --wait-replicas and --wait-timeout (WithReplicas).
	waitReplicas int
	waitTimeout  time.Duration
	// debounce, debounceQuiet and debounceMaxWait are --debounce, --debounce-quiet and
	// --debounce-max-wait (WithDebounce).
	debounce                       string
	debounceQuiet, debounceMaxWait time.Duration
	// traceparent and tracestate are --traceparent and --tracestate (or $TRACEPARENT and
	// $TRACESTATE): the W3C trace context the jobs carry to their handlers.
	traceparent, tracestate string

	asJSON bool
	// noWarn is --no-warn: no publish warnings on stderr (warnPublish); warnWindow is
	// --warn-window, how far back they look (InspectorConfig.PublishWarningWindow).
	noWarn     bool
	warnWindow time.Duration
	// jsonl is --jsonl: a file of jobs, one a line ("-": standard input); see publish_jsonl.go.
	jsonl string

	// set by the command from the flag set: which optional flags were given
	payloadGiven, maxRetriesGiven, uniqueTTLGiven, waitTimeoutGiven bool
}

func newPublishCmd(a *app) *cobra.Command {
	var pf publishFlags
	cmd := &cobra.Command{
		Use:   "publish (--type T [--payload JSON | --payload @file] | --jsonl FILE|-)",
		Short: "Publish jobs and print their ids, one per line",
		Long: `Publish one job (or --count copies of it) and print each job's id on its own line
(with --json, one {"id":..,"created":true|false} object per line).

The payload must be JSON. Give it inline, as @path to read a file, or as @- to read standard
input; without --payload the job has an empty payload. Nothing is written when any input is
refused.

Publishing an --id that exists again is safe: when the job there has the same type and payload,
nothing is written, a note on stderr says so, and the command exits 0 (its id is printed as
usual, "created":false with --json). When that job has another type or payload, the publish is
refused: exit 1, saying what differs. A --unique key that a live job holds works the same way
(that job's id is printed), whatever its payload.

With --wait-replicas N the command succeeds only once N replicas of the Redis master have the
jobs (Redis WAIT, in the same round trip as the publish), so that a failover cannot lose them.
When fewer confirm within --wait-timeout, the ids are printed all the same (the jobs are on the
master) and the command exits 1 saying how many confirmed.

With --debounce KEY (and --debounce-quiet, --debounce-max-wait) publishes with the same key
become one job: a publish while the key's job waits replaces its payload and prints that job's
id ("created":false,"debounced":true with --json, a note on stderr without), and the job runs
--debounce-quiet after the last publish or --debounce-max-wait after the first, whichever is
sooner. It cannot be combined with --id, --delay or --unique.

A publish to a queue that no live worker has read in the last 10 minutes (--warn-window), or of a
type that no live worker has handled in that time, is made all the same (a typo is not refused: workers may
start later), and a line on stderr says so: 'warning: no worker has read queue "emials" in the
last 10m0s (known queues read: emails)'. Each worker's heartbeat records what it reads and
handles. --no-warn leaves the warnings out.

With --traceparent (or $TRACEPARENT, as a CI system or a traced script passes it on) the jobs
carry that W3C trace context to their handlers, as the traceparent header does over HTTP: a
worker with a tracer provider records each attempt in that trace. A malformed --traceparent
is refused; a malformed $TRACEPARENT is ignored with a note on stderr.


With --jsonl FILE (or - for standard input) it publishes one job per line of the file, each line
a JSON object with the fields of the API's job body (POST /v1/queues/{queue}/jobs: type,
payload, id, delay, run_at, max_retries, timeout, unique, metadata, retention, debounce,
limit_key, group, priority), into --queue, in batches of 1000. Blank lines are skipped. A line
that is not a job, or that Redis refuses (an id taken by another job), is reported on stderr as
"line N: REASON" and the other lines are published all the same; a summary ("published N jobs
from M lines") goes to stderr, and the command exits 1 when any line failed. It prints each
published job's id; with --json, one {"line":N,"id":..,"created":..} or {"line":N,"error":..}
object per line. The job flags (--type, --payload, --id, ...) cannot be used with it.`,
		Example: `  conveyor publish --type echo --payload '{"hello":"world"}'
  conveyor publish --queue emails --type http --payload @hook.json --max-retries 10
  conveyor publish --type sleep --payload '{"ms":500}' --delay 1m --count 100
  conveyor publish --type reindex --payload '{"doc":42}' --debounce doc-42 --debounce-quiet 2s --debounce-max-wait 30s
  conveyor publish --type echo --traceparent 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
  conveyor publish --queue emails --jsonl jobs.jsonl
  jq -c '{type:"email", payload:.}' users.json | conveyor publish --queue emails --jsonl - --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pf.payloadGiven = cmd.Flags().Changed("payload")
			pf.maxRetriesGiven = cmd.Flags().Changed("max-retries")
			pf.uniqueTTLGiven = cmd.Flags().Changed("unique-ttl")
			pf.waitTimeoutGiven = cmd.Flags().Changed("wait-timeout")
			if cmd.Flags().Changed("jsonl") {
				var given []string
				for _, name := range jsonlFlagsRefused {
					if cmd.Flags().Changed(name) {
						given = append(given, "--"+name)
					}
				}
				if len(given) > 0 {
					return usageErrorf("--jsonl takes each job's fields from its line: %s cannot be used with it", strings.Join(given, ", "))
				}
				if pf.jsonl == "" {
					return usageErrorf("--jsonl needs a file name, or - for standard input")
				}
				if err := checkWarnWindow(pf.warnWindow); err != nil {
					return err
				}
				// The lines' jobs carry --traceparent (or $TRACEPARENT) like the flags' jobs.
				ctx, err := a.traceContext(cmd, &pf)
				if err != nil {
					return err
				}
				return a.publishJSONL(ctx, &pf)
			}
			if !cmd.Flags().Changed("type") {
				return usageErrorf("required flag --type not set")
			}
			return a.publish(cmd, &pf)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&pf.queue, "queue", "q", pipeline.DefaultQueue, "queue to publish to")
	f.StringVarP(&pf.jobType, "type", "t", "", "job type: selects the handler (required)")
	f.StringVarP(&pf.payload, "payload", "p", "", "JSON payload, or @file, or @- for standard input")
	f.DurationVar(&pf.delay, "delay", 0, "run the job this long from now instead of at once")
	f.IntVar(&pf.maxRetries, "max-retries", defaultMaxRetries, "retries after a failed attempt before the job goes to the dead set")
	f.StringVar(&pf.id, "id", "", "job id instead of a generated one (an existing id with the same job: nothing new; with another: refused)")
	f.IntVarP(&pf.count, "count", "n", 1, "publish this many copies of the job")
	f.DurationVar(&pf.timeout, "timeout", 0, "bound each attempt's run time (0: no bound)")
	f.StringVar(&pf.unique, "unique", "", "de-duplication key: while a live job holds it, publish returns that job")
	f.DurationVar(&pf.uniqueTTL, "unique-ttl", defaultUniqueTTL, "how long --unique holds its key at most")
	f.StringVar(&pf.limitKey, "limit-key", "", "the key the queue's per-key limits count the job under (a tenant, an account)")
	f.StringVar(&pf.group, "group", "", "the job's fair group (a tenant, an account): the queue serves its groups round-robin")
	f.IntVar(&pf.priority, "priority", pipeline.MinPriority, "the job's priority level within its queue, 1 (served first, the default) to 4: workers start a queue's level-1 jobs before its level-2 ones, and so on")
	f.StringArrayVar(&pf.meta, "meta", nil, "metadata pair key=value (repeatable)")
	f.IntVar(&pf.waitReplicas, "wait-replicas", 0, "succeed only once this many replicas have the jobs (Redis WAIT); exit 1 when fewer confirm within --wait-timeout")
	f.DurationVar(&pf.waitTimeout, "wait-timeout", defaultReplicaTimeout, "how long --wait-replicas waits for the replicas")
	f.StringVar(&pf.debounce, "debounce", "", "debounce key: publishes with it while its job waits replace that job's payload (needs --debounce-quiet and --debounce-max-wait)")
	f.DurationVar(&pf.debounceQuiet, "debounce-quiet", 0, "with --debounce: run the job this long after the key's last publish")
	f.DurationVar(&pf.debounceMaxWait, "debounce-max-wait", 0, "with --debounce: run the job at most this long after the key's first publish of its window")
	f.StringVar(&pf.traceparent, "traceparent", "", "W3C trace context the jobs carry to their handlers (00-<trace id>-<span id>-<flags>); env $"+envTraceparent)
	f.StringVar(&pf.tracestate, "tracestate", "", "W3C tracestate that goes with --traceparent; env $"+envTracestate)
	f.BoolVar(&pf.asJSON, "json", false, `print one {"id":..,"created":true|false} object per job`)
	f.BoolVar(&pf.noWarn, "no-warn", false, "print no warning on stderr when no live worker has read the queue, or handled the type, within --warn-window")
	f.DurationVar(&pf.warnWindow, "warn-window", pipeline.DefaultPublishWarningWindow, "how far back a worker that read the queue and handled the type counts (at most 24h)")
	f.StringVar(&pf.jsonl, "jsonl", "", "publish the jobs of this file (- for standard input), one JSON object a line with the fields of the API's job body")
	return cmd
}

// publishRequest is a validated publish: the task to copy and the options of every copy.
type publishRequest struct {
	task  pipeline.Task
	opts  []pipeline.Option
	count int
}

// request validates the flags and reads the payload; it touches no Redis.
func (pf *publishFlags) request(stdin io.Reader) (*publishRequest, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, usageErrorf(format, args...)) }
	if pf.count < 1 {
		bad("--count must be at least 1, not %d", pf.count)
	}
	if pf.id != "" && pf.count > 1 {
		bad("--id names one job: it cannot be used with --count %d", pf.count)
	}
	if pf.delay < 0 {
		bad("--delay must not be negative, not %s", pf.delay)
	}
	if pf.maxRetriesGiven && pf.maxRetries < 0 {
		bad("--max-retries must not be negative, not %d", pf.maxRetries)
	}
	if pf.timeout < 0 {
		bad("--timeout must not be negative, not %s", pf.timeout)
	}
	if pf.priority < pipeline.MinPriority || pf.priority > pipeline.MaxPriority {
		bad("--priority must be %d (served first) to %d, not %d", pipeline.MinPriority, pipeline.MaxPriority, pf.priority)
	}
	switch {
	case pf.unique == "" && pf.uniqueTTLGiven:
		bad("--unique-ttl needs --unique")
	case pf.unique != "" && pf.uniqueTTL <= 0:
		bad("--unique-ttl must be positive, not %s", pf.uniqueTTL)
	case pf.unique != "" && pf.count > 1:
		bad("--unique lets only one job hold its key: it cannot be used with --count %d", pf.count)
	}
	switch {
	case pf.debounce == "" && (pf.debounceQuiet != 0 || pf.debounceMaxWait != 0):
		bad("--debounce-quiet and --debounce-max-wait need --debounce KEY")
	case pf.debounce != "" && (pf.debounceQuiet == 0 || pf.debounceMaxWait == 0):
		bad("--debounce needs --debounce-quiet and --debounce-max-wait")
	case pf.debounce != "" && (pf.id != "" || pf.delay != 0 || pf.unique != ""):
		bad("--debounce cannot be combined with --id, --delay or --unique: the debounce window names the job and decides when it runs")
	}
	if err := checkWarnWindow(pf.warnWindow); err != nil {
		errs = append(errs, err)
	}
	if err := checkReplicas(pf.waitReplicas, pf.waitTimeout); err != nil {
		errs = append(errs, err)
	} else if pf.waitTimeoutGiven && pf.waitReplicas == 0 {
		bad("--wait-timeout needs --wait-replicas")
	}
	md, err := parseMeta(pf.meta)
	if err != nil {
		errs = append(errs, usageError{err})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	var payload []byte
	if pf.payloadGiven {
		if payload, err = readPayload(pf.payload, stdin, maxPayloadBytes); err != nil {
			if errors.Is(err, pipeline.ErrPayloadTooLarge) {
				return nil, err // a refusal by the system's limit, not a usage error
			}
			return nil, usageError{err}
		}
	}

	var opts []pipeline.Option
	if pf.id != "" {
		opts = append(opts, pipeline.WithID(pf.id))
	}
	if pf.delay > 0 {
		opts = append(opts, pipeline.WithDelay(pf.delay))
	}
	if pf.maxRetriesGiven {
		opts = append(opts, pipeline.WithMaxRetries(pf.maxRetries))
	}
	if pf.timeout > 0 {
		opts = append(opts, pipeline.WithTimeout(pf.timeout))
	}
	if pf.unique != "" {
		opts = append(opts, pipeline.WithUnique(pf.unique, pf.uniqueTTL))
	}
	if pf.debounce != "" {
		opts = append(opts, pipeline.WithDebounce(pf.debounce, pf.debounceQuiet, pf.debounceMaxWait))
	}
	if pf.limitKey != "" {
		opts = append(opts, pipeline.WithLimitKey(pf.limitKey))
	}
	if pf.group != "" {
		opts = append(opts, pipeline.WithGroup(pf.group))
	}
	if pf.priority > pipeline.MinPriority {
		opts = append(opts, pipeline.WithPriority(pf.priority))
	}
	if pf.waitReplicas > 0 {
		opts = append(opts, pipeline.WithReplicas(pf.waitReplicas, pf.waitTimeout))
	}
	return &publishRequest{
		task:  pipeline.Task{Type: pf.jobType, Payload: payload, Metadata: md},
		opts:  opts,
		count: pf.count,
	}, nil
}

func (a *app) publish(cmd *cobra.Command, pf *publishFlags) error {
	req, err := pf.request(a.stdin)
	if err != nil {
		return err
	}
	ctx, err := a.traceContext(cmd, pf)
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	out := bufio.NewWriter(a.stdout)
	defer out.Flush()
	published := 0
	for published < req.count {
		tasks := make([]pipeline.Task, min(publishChunk, req.count-published))
		for i := range tasks {
			tasks[i] = req.task
		}
		jobs, err := c.EnqueueBatch(ctx, pf.queue, tasks, req.opts...)
		var unconfirmed error
		if errors.Is(err, pipeline.ErrNotReplicated) && !errors.Is(err, pipeline.ErrConflict) {
			// The jobs are on the master: print their ids as usual (they run unless the master
			// fails before a replica has them; publishing one again with --id waits again), then
			// fail.
			unconfirmed, err = err, nil
		}
		if err != nil {
			if published > 0 {
				return fmt.Errorf("after %d jobs were published: %w", published, err)
			}
			if errors.Is(err, pipeline.ErrConflict) {
				return fmt.Errorf("%w; nothing was published (publish the same type and payload, or another --id)", unwrapConflict(err))
			}
			return err
		}
		for _, j := range jobs {
			if j.Duplicate {
				what := "it exists already, with the same type and payload"
				if pf.unique != "" && j.ID != pf.id {
					what = fmt.Sprintf("it holds the unique key %q", pf.unique)
				}
				fmt.Fprintf(a.stderr, "conveyor: job %s not published again: %s\n", j.ID, what)
			}
			if j.Debounced {
				fmt.Fprintf(a.stderr, "conveyor: job %s debounced: this publish replaced its payload (publish %d of its window, due %s)\n",
					j.ID, j.Debounce.Publishes, j.RunAt.UTC().Format(time.RFC3339Nano))
			}
			if pf.asJSON {
				if err := writeJSON(out, publishedJob{ID: j.ID, Created: !j.Duplicate && !j.Debounced, Debounced: j.Debounced}); err != nil {
					return err
				}
				continue
			}
			fmt.Fprintln(out, j.ID)
		}
		published += len(jobs)
		if unconfirmed != nil {
			if err := out.Flush(); err != nil {
				return err
			}
			return fmt.Errorf("%w; the %d jobs printed are on the master, which may lose them if it fails now (publish one again with --id to wait again)",
				unconfirmed, published)
		}
	}
	if err := out.Flush(); err != nil {
		return err
	}
	a.warnPublish(ctx, pf, pf.queue, req.task.Type)
	return nil
}

// warnPublish prints on stderr, after a publish to queue of jobs of types, a warning when no
// live worker has read queue lately, or handled one of types (pipeline.Inspector.PublishWarnings),
// unless --no-warn. It is a hint about a publish already made: when the sightings cannot be
// read, it says nothing, and the command's outcome is the publish's.
func (a *app) warnPublish(ctx context.Context, pf *publishFlags, queue string, types ...string) {
	if pf.noWarn {
		return
	}
	rdb, err := a.redis()
	if err != nil {
		return
	}
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: a.prefix, PublishWarningWindow: pf.warnWindow})
	if err != nil {
		return
	}
	warnings, err := insp.PublishWarnings(ctx, queue, types...)
	if err != nil {
		return
	}
	for _, w := range warnings {
		fmt.Fprintln(a.stderr, "warning: "+w)
	}
}

// checkWarnWindow refuses a --warn-window the workers' sightings cannot answer: they are kept a
// day (engine.SightingsKept). 0 is the library's default, as for a caller that builds the
// flags itself.
func checkWarnWindow(d time.Duration) error {
	if d < 0 || d > 24*time.Hour {
		return usageErrorf("--warn-window must be at most 24h and not negative (0: the default, %s), not %s",
			pipeline.DefaultPublishWarningWindow, d)
	}
	return nil
}

// The trace context of a publish, after the environment variable carriers of OpenTelemetry's
// proposal (OTEP 258): the W3C header names in capitals.
const (
	envTraceparent = "TRACEPARENT"
	envTracestate  = "TRACESTATE"
)

// traceContext is the command's context with the trace context of --traceparent (else
// $TRACEPARENT) and --tracestate (else $TRACESTATE). A malformed --traceparent is refused; a
// malformed $TRACEPARENT, inherited from whatever started the command, is ignored with a note
// on stderr.
func (a *app) traceContext(cmd *cobra.Command, pf *publishFlags) (context.Context, error) {
	tp, from := pf.traceparent, "--traceparent"
	if !cmd.Flags().Changed("traceparent") {
		tp, from = a.getenv(envTraceparent), "$"+envTraceparent
	}
	ts := pf.tracestate
	if !cmd.Flags().Changed("tracestate") {
		ts = a.getenv(envTracestate)
	}
	if tp == "" {
		return cmd.Context(), nil
	}
	ctx, ok := fromTraceHeaders(cmd.Context(), tp, ts)
	switch {
	case ok:
	case from == "--traceparent":
		return nil, usageErrorf("%s %q is not a W3C traceparent (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>)", from, tp)
	default:
		// Inherited from whatever started the command: a broken one must not stop publishing.
		fmt.Fprintf(a.stderr, "conveyor: ignoring %s %q: not a W3C traceparent; the jobs carry no trace context\n", from, tp)
	}
	return ctx, nil
}

// publishedJob is a line of publish --json.
type publishedJob struct {
	ID      string `json:"id"`
	Created bool   `json:"created"`
	// Debounced: the publish joined the pending job of its --debounce key.
	Debounced bool `json:"debounced,omitempty"`
}

// unwrapConflict strips a batch task's position from a conflict error: publish sends one job.
func unwrapConflict(err error) error {
	msg := err.Error()
	if _, rest, ok := strings.Cut(msg, "task 0: "); ok {
		msg = rest
	}
	msg = strings.TrimPrefix(msg, pipeline.ErrConflict.Error()+": ")
	return errors.New(msg)
}

// readPayload turns the --payload argument into a job payload: "@path" is the file's content,
// "@-" standard input's, anything else the argument itself. The payload must be valid JSON and
// at most limit bytes. An inline payload is kept byte for byte; a read one loses surrounding
// JSON whitespace (such as a file's final newline), which changes nothing of its meaning. At most a little over limit bytes are read, so a
// huge file is refused without being loaded.
func readPayload(arg string, stdin io.Reader, limit int) ([]byte, error) {
	what := "--payload"
	var data []byte
	if name, ok := strings.CutPrefix(arg, "@"); ok {
		var r io.Reader
		if name == "-" {
			what, r = "standard input (--payload @-)", stdin
		} else if name == "" {
			return nil, errors.New("--payload @ needs a file name (@path) or - for standard input (@-)")
		} else {
			f, err := os.Open(name)
			if err != nil {
				return nil, fmt.Errorf("--payload: %w", err)
			}
			defer f.Close()
			what, r = "payload file "+name, f
		}
		// Read a little past the limit so that trailing whitespace does not refuse a payload
		// that fits; anything past that is too large whatever it holds.
		capBytes := int64(limit) + 4096
		var err error
		if data, err = io.ReadAll(io.LimitReader(r, capBytes)); err != nil {
			return nil, fmt.Errorf("reading %s: %w", what, err)
		}
		if int64(len(data)) == capBytes {
			return nil, fmt.Errorf("%w: %s holds more than %d bytes", pipeline.ErrPayloadTooLarge, what, limit)
		}
		data = bytes.Trim(data, jsonSpace)
	} else {
		data = []byte(arg)
	}
	if len(data) > limit {
		return nil, fmt.Errorf("%w: %s has %d bytes, the limit is %d", pipeline.ErrPayloadTooLarge, what, len(data), limit)
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("%s is empty, which is not JSON (leave out --payload for an empty payload)", what)
	}
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return nil, fmt.Errorf("%s is not valid JSON: %v (at byte %d)", what, err, syn.Offset)
		}
		return nil, fmt.Errorf("%s is not valid JSON: %v", what, err)
	}
	return data, nil
}

// jsonSpace is the whitespace JSON allows around a value.
const jsonSpace = " \t\r\n"

// parseMeta reads --meta key=value pairs. A pair without '=' or with an empty key, and a key
// given twice, are refused.
func parseMeta(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	md := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--meta %q: want key=value", p)
		}
		if _, dup := md[k]; dup {
			return nil, fmt.Errorf("--meta: key %q given twice", k)
		}
		md[k] = v
	}
	return md, nil
}
