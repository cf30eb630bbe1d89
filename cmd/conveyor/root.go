package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/pipeline"
)

// Global settings.
const (
	envRedisURL     = "CONVEYOR_REDIS_URL"
	defaultRedisURL = "redis://127.0.0.1:6379/0"
)

// commands builds the subcommands. Each subcommand's file adds itself from its init, so a new
// subcommand (serve, say) is one new file.
var commands []func(*app) *cobra.Command

func addCommand(newCmd func(*app) *cobra.Command) { commands = append(commands, newCmd) }

func init() {
	// Log timestamps with milliseconds: jobs take milliseconds.
	zerolog.TimeFieldFormat = time.RFC3339Nano
	// go-redis logs dial failures on its own; they reach the user as the command's error.
	redis.SetLogger(quietRedisLog{})
}

type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// app is what every command shares: the standard streams, the environment, the global flags,
// the logger and, once a command asks for it, the Redis connection.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string

	redisURL      string
	redisExplicit bool // --redis was given on the command line
	cluster       bool
	prefix        string
	level         logLevel

	log zerolog.Logger
	rdb redis.UniversalClient
}

// run executes one command line and returns the process's exit code. Errors are printed as
// "conveyor: <message>" on stderr, followed by a hint for usage errors.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv, log: zerolog.Nop()}
	defer a.close()
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil {
		// One line per error of a joined error, each with the prefix.
		for line := range strings.Lines(err.Error()) {
			fmt.Fprintf(stderr, "conveyor: %s\n", strings.TrimSuffix(line, "\n"))
		}
		if errors.As(err, new(usageError)) && cmd != nil {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
	}
	return exitCode(err)
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "conveyor",
		Short: "Reliable background jobs on Redis Streams",
		Long: `Conveyor runs background jobs on Redis Streams: publish a job, get its id, poll the id
for its status and result. Workers retry failed jobs with exponential backoff, recover jobs whose
worker died, and move jobs that keep failing to a dead set you can inspect and replay.

New here? Run 'conveyor demo': it needs no Redis of its own.`,
		Example: `  conveyor worker --queue emails --concurrency 20
  conveyor publish --queue emails --type echo --payload '{"to":"ada@example.com"}'
  conveyor status --queue emails 01JABCDEF... --json
  conveyor stats --all`,
		Args:              unknownSubcommand,
		RunE:              func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		PersistentPreRunE: a.setup,
		SilenceErrors:     true,
		SilenceUsage:      true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	f := root.PersistentFlags()
	f.StringVar(&a.redisURL, "redis", defaultRedisURL,
		"Redis URL (redis://, rediss:// for TLS, unix://); the default comes from $"+envRedisURL+" when set")
	f.BoolVar(&a.cluster, "cluster", false,
		"treat --redis as a Redis Cluster seed URL (redis://h1:p1?addr=h2:p2)")
	f.StringVar(&a.prefix, "prefix", keys.DefaultPrefix, "prefix of every Redis key")
	a.level = logLevel(zerolog.InfoLevel)
	f.Var(&a.level, "log-level", "log level on stderr: trace, debug, info, warn or error")
	for _, newCmd := range commands {
		root.AddCommand(newCmd(a))
	}
	return root
}

// setup runs before every subcommand: it checks required flags (so a missing one is a usage
// error, exit 2), resolves the Redis URL and builds the logger.
func (a *app) setup(cmd *cobra.Command, _ []string) error {
	var missing []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if _, required := f.Annotations[cobra.BashCompOneRequiredFlag]; required && !f.Changed {
			missing = append(missing, "--"+f.Name)
		}
	})
	if len(missing) > 0 {
		return usageErrorf("required flag %s not set", strings.Join(missing, ", "))
	}
	if a.prefix == "" {
		return errors.New("--prefix must not be empty")
	}
	if f := cmd.Flags().Lookup("redis"); f != nil && f.Changed {
		a.redisExplicit = true
	} else if u := a.getenv(envRedisURL); u != "" {
		a.redisURL = u
	}
	a.log = zerolog.New(zerolog.ConsoleWriter{
		Out: a.stderr, TimeFormat: "15:04:05.000", NoColor: !isTerminal(a.stderr),
	}).Level(zerolog.Level(a.level)).With().Timestamp().Logger()
	return nil
}

// redisChosen reports whether the user named a Redis server (--redis or $CONVEYOR_REDIS_URL)
// rather than leaving the default.
func (a *app) redisChosen() bool { return a.redisExplicit || a.getenv(envRedisURL) != "" }

// redis returns the connection to the configured server, opening it on first use. go-redis
// dials lazily: a bad address shows up as the first command's error.
func (a *app) redis() (redis.UniversalClient, error) {
	if a.rdb == nil {
		rdb, err := dial(a.redisURL, a.cluster)
		if err != nil {
			return nil, err
		}
		a.rdb = rdb
	}
	return a.rdb, nil
}

// client returns a pipeline.Client over the configured server.
func (a *app) client() (*pipeline.Client, error) {
	rdb, err := a.redis()
	if err != nil {
		return nil, err
	}
	return pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: a.prefix}), nil
}

// inspector returns a pipeline.Inspector over the configured server: what every command that
// looks at or administers queues and jobs goes through.
func (a *app) inspector() (*pipeline.Inspector, error) {
	rdb, err := a.redis()
	if err != nil {
		return nil, err
	}
	return pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: a.prefix}), nil
}

func (a *app) close() {
	if a.rdb != nil {
		_ = a.rdb.Close()
	}
}

// dial opens a client for a redis://, rediss:// or unix:// URL, or a cluster client for a
// cluster seed URL.
func dial(rawURL string, cluster bool) (redis.UniversalClient, error) {
	if cluster {
		opt, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis cluster URL %s: %w", redactURL(rawURL), err)
		}
		return redis.NewClusterClient(opt), nil
	}
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis URL %s: %w", redactURL(rawURL), err)
	}
	return redis.NewClient(opt), nil
}

// redactURL hides the password of a URL for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// usageError marks a command line that cannot be run as written: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// Argument validators: a wrong count is a usage error.

func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("unexpected argument %q (this command takes flags only)", args[0])
	}
	return nil
}

func oneArg(_ *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usageErrorf("want exactly one job id, got %d arguments", len(args))
	}
	return nil
}

// unknownSubcommand is the Args of a command that only groups subcommands (the root, dead):
// run bare it shows help; with an argument that names no subcommand it is a usage error.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	cmd.SuggestionsMinimumDistance = cmp.Or(cmd.SuggestionsMinimumDistance, 2)
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return usageError{errors.New(msg)}
}

// logLevel is the --log-level flag: a malformed value is a flag error (exit 2).
type logLevel zerolog.Level

var logLevels = []string{"trace", "debug", "info", "warn", "error"}

func (l *logLevel) String() string { return zerolog.Level(*l).String() }
func (l *logLevel) Type() string   { return "level" }

func (l *logLevel) Set(s string) error {
	if !slices.Contains(logLevels, s) {
		return fmt.Errorf("want one of %s", strings.Join(logLevels, ", "))
	}
	lvl, err := zerolog.ParseLevel(s)
	*l = logLevel(lvl)
	return err
}

// Output helpers.

// writeJSON writes v as one line of JSON.
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// newTable returns a writer that aligns tab-separated columns; call Flush at the end.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// formatTime shows a job time with milliseconds and how long ago it was; "-" when not yet.
func formatTime(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	s := t.Local().Format("2006-01-02 15:04:05.000 MST")
	switch d := now.Sub(t).Round(time.Millisecond); {
	case d >= 0:
		return s + " (" + d.String() + " ago)"
	default:
		return s + " (in " + (-d).String() + ")"
	}
}

// tableTime shows a time in a table cell, to the millisecond and with its zone; "-" when not
// yet.
func tableTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05.000 MST")
}

// orDash shows an empty string as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// isTerminal reports whether w is a terminal (for colors and progress bars).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// notFound turns the pipeline's ErrNotFound into a message that names the job and queue.
func notFound(err error, queue, id string) error {
	if errors.Is(err, pipeline.ErrNotFound) {
		return fmt.Errorf("job %s not found in queue %q", id, queue)
	}
	return err
}
