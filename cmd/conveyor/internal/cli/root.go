package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
)

// Global settings. Every global flag has an environment variable (envVars); a flag given on
// the command line wins over it.
const (
	envRedisURL  = "CONVEYOR_REDIS_URL"
	envCluster   = "CONVEYOR_CLUSTER"
	envPrefix    = "CONVEYOR_PREFIX"
	envLogLevel  = "CONVEYOR_LOG_LEVEL"
	envLogFormat = "CONVEYOR_LOG_FORMAT"
	// envKeys holds the key file's text itself (keyring.EnvVar), not a path: a secret
	// store's value goes into the environment as it is.
	envKeys         = "CONVEYOR_KEYS"
	defaultRedisURL = "redis://127.0.0.1:6379/0"
)

// envVar is an environment variable that the binary reads, and the flag that wins over it.
type envVar struct {
	Name    string // CONVEYOR_...
	Command string // the command whose flag it stands for; "" for a global flag
	Flag    string // that flag's name, without dashes
}

// envVars is every environment variable the binary reads: those of the global flags, which
// setup applies, and those of single commands' flags. rootCmd adds "env $NAME" to each flag's
// help from it. It is the one list to check a deployment against: TestEnvVars checks that
// every global flag has its variable here and that the source reads no CONVEYOR_ variable
// missing from it, and the docker-compose test checks that docker-compose.yml sets only
// variables listed here. A new variable is one row here (and, for a command's flag, the
// command reading it).
var envVars = []envVar{
	{envRedisURL, "", "redis"},
	{envCluster, "", "cluster"},
	{envPrefix, "", "prefix"},
	{envLogLevel, "", "log-level"},
	{envLogFormat, "", "log-format"},
	{envKeys, "", "keys"},
	{envTLSCA, "", "tls-ca"},
	{envTLSCert, "", "tls-cert"},
	{envTLSKey, "", "tls-key"},
	{envTLSServerName, "", "tls-server-name"},
	{envAPIAddr, "serve", "addr"},
	{envAPIToken, "serve", "auth-token"},
	{envPayloadToken, "serve", "payload-token"},
	{envAPIAllowedHosts, "serve", "allowed-host"},
	{envAPIMaxQueues, "serve", "max-queues"},
	{envAPICreateQueues, "serve", "create-queues"},
	{envPostgres, "relay", "postgres"},
	{envTraceparent, "publish", "traceparent"},
	{envTracestate, "publish", "tracestate"},
}

// commands builds the subcommands. Each subcommand's file adds itself from its init, so a new
// subcommand (serve, say) is one new file.
var commands []func(*app) *cobra.Command

func addCommand(newCmd func(*app) *cobra.Command) { commands = append(commands, newCmd) }

func init() {
	// Log timestamps in UTC with milliseconds (jobs take milliseconds), a fixed width and the
	// zone: 2026-11-26T09:12:03.123Z. The console shows them in local time (consoleTimeFormat).
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	zerolog.TimestampFunc = func() time.Time { return time.Now().UTC() }
	// Every duration field, whichever package logs it, carries its unit: took=2.5s,
	// retry_in=756ms, in JSON as a string ("2.5s"), never a bare number.
	zerolog.DurationFieldFormat = zerolog.DurationFormatString
	// go-redis logs dial failures on its own; they reach the user as the command's error.
	redis.SetLogger(quietRedisLog{})
}

// consoleTimeFormat is the time of a console log line, as in the tables: local time to the
// millisecond, with the zone.
const consoleTimeFormat = "2006-01-02 15:04:05.000 MST"

type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// app is what every command shares: the standard streams, the environment, the global flags,
// the logger and, once a command asks for it, the Redis connection.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string

	redisURL      string
	redisExplicit bool   // --redis was given on the command line
	redisSource   string // where redisURL came from, for messages: --redis, $CONVEYOR_REDIS_URL or the default
	cluster       bool
	prefix        string
	level         logLevel
	format        logFormat
	tls           tlsFlags
	keysArg       string            // --keys FILE, or the keys' text from $CONVEYOR_KEYS
	keys          *keyring.Keyring  // encryption at rest: nil unless --keys or $CONVEYOR_KEYS
	fromEnv       map[string]string // flag name -> "$VARIABLE", for the global flags the environment set

	log zerolog.Logger
	rdb redis.UniversalClient

	stopTracing func() // flushes the exported spans (setupTracing); nil when none are exported
}

// Run executes one command line (args without the program's name) and returns the process's
// exit code (see exitCode). Errors are printed as "conveyor: <message>" on stderr, followed by a hint for usage errors. When
// ctx ends before the command returns (SIGINT or SIGTERM), the command was interrupted: exit
// 130, except for a command whose normal end is a signal (the worker), which exits 0 once it
// has drained.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv, log: zerolog.Nop(),
		redisURL: defaultRedisURL, redisSource: "the default"}
	defer a.close()
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	var cmd *cobra.Command
	err := unknownCommandIn(root, args)
	if err != nil {
		cmd = root
	} else {
		cmd, err = root.ExecuteContextC(ctx)
	}
	interrupted := ctx.Err() != nil && (err != nil || cmd == nil || !endsOnSignal(cmd))
	switch {
	case interrupted && (err == nil || errors.Is(err, context.Canceled)):
		fmt.Fprintln(stderr, "conveyor: interrupted")
	case err != nil:
		// One line per error of a joined error, each with the prefix.
		for line := range strings.Lines(a.describe(err)) {
			fmt.Fprintf(stderr, "conveyor: %s\n", strings.TrimSuffix(line, "\n"))
		}
		if exitCode(err) == 2 && cmd != nil {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
	}
	if interrupted {
		return exitInterrupted
	}
	return exitCode(err)
}

// annotationEndsOnSignal marks a command whose normal end is SIGINT or SIGTERM (the worker):
// it exits 0 once it has shut down cleanly, not 130.
const annotationEndsOnSignal = "conveyor/ends-on-signal"

func endsOnSignal(cmd *cobra.Command) bool {
	_, ok := cmd.Annotations[annotationEndsOnSignal]
	return ok
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
	f.StringVar(&a.redisURL, "redis", defaultRedisURL, "Redis URL (redis://, rediss:// for TLS, unix://)")
	f.BoolVar(&a.cluster, "cluster", false, "treat --redis as a Redis Cluster seed URL (redis://h1:p1?addr=h2:p2)")
	f.StringVar(&a.prefix, "prefix", pipeline.DefaultPrefix, "prefix of every Redis key")
	a.level = logLevel(zerolog.InfoLevel)
	f.Var(&a.level, "log-level", "log level on stderr: trace, debug, info, warn or error")
	f.Var(&a.format, "log-format", "log format on stderr: console or json (default console on a terminal, json otherwise)")
	f.StringVar(&a.tls.ca, "tls-ca", "", "PEM file of the CA that signed Redis's certificate, for rediss:// (default the system's CAs)")
	f.StringVar(&a.tls.cert, "tls-cert", "", "PEM file of a client certificate to present to Redis, for rediss:// (with --tls-key)")
	f.StringVar(&a.tls.key, "tls-key", "", "PEM file of the private key of --tls-cert")
	f.StringVar(&a.tls.serverName, "tls-server-name", "", "name to verify Redis's certificate against (default the host of the URL)")
	f.StringVar(&a.keysArg, "keys", "", "key file of encryption at rest (lines \"ID BASE64-KEY\", the first seals; conveyor keys new): "+
		"payloads and results are sealed on publish and shown opened; the variable holds the file's text itself")
	for _, newCmd := range commands {
		root.AddCommand(newCmd(a))
	}
	showEnvInHelp(root)
	finishRoot(a, root)
	return root
}

// setup runs before every subcommand: it checks required flags (so a missing one is a usage
// error, exit 2), takes the global settings that were not given as flags from the
// environment, checks them, and builds the logger.
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
	changed := func(name string) bool {
		f := cmd.Flags().Lookup(name)
		return f != nil && f.Changed
	}
	errs := a.applyEnv(cmd)
	if changed("redis") {
		a.redisExplicit, a.redisSource = true, "--redis"
	} else if a.fromEnv["redis"] != "" {
		a.redisSource = "$" + envRedisURL
	}
	if a.prefix == "" {
		errs = append(errs, usageErrorf("--prefix must not be empty"))
	}
	if err := checkRedisURL(a.redisURL, a.redisSource, a.cluster); err != nil {
		errs = append(errs, err)
	} else if err := a.tls.check(a.redisURL, a.cluster, a.source); err != nil {
		errs = append(errs, err)
	}
	if err := a.loadKeys(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	a.log = newLogger(a.stderr, a.format, zerolog.Level(a.level))
	return a.setupTracing(cmd.Context())
}

// loadKeys reads the keyring of --keys (a file) or $CONVEYOR_KEYS (the file's text); a bad
// one is a usage error that names where it came from, never a secret.
func (a *app) loadKeys() error {
	if a.keysArg == "" {
		return nil
	}
	var err error
	if a.fromEnv["keys"] != "" {
		a.keys, err = keyring.Parse(a.keysArg)
		if err != nil {
			return usageErrorf("$%s: %v", envKeys, err)
		}
		return nil
	}
	if a.keys, err = keyring.Load(a.keysArg); err != nil {
		return usageErrorf("--keys: %v", err)
	}
	return nil
}

// applyEnv sets each global flag not given on the command line from its environment variable
// (envVars), as if it had been given; a malformed value is a usage error naming the variable.
func (a *app) applyEnv(cmd *cobra.Command) []error {
	var errs []error
	a.fromEnv = map[string]string{}
	for _, ev := range envVars {
		f := cmd.Flags().Lookup(ev.Flag)
		v := a.getenv(ev.Name)
		if ev.Command != "" || f == nil || f.Changed || v == "" {
			continue
		}
		if err := f.Value.Set(v); err != nil {
			if f.Value.Type() == "bool" {
				err = errors.New("want true or false")
			}
			errs = append(errs, usageErrorf("$%s %q: %v", ev.Name, v, err))
			continue
		}
		a.fromEnv[ev.Flag] = "$" + ev.Name
	}
	return errs
}

// source names where a global flag's value came from, for messages: "--flag" or "$VARIABLE".
func (a *app) source(flag string) string {
	if env := a.fromEnv[flag]; env != "" {
		return env
	}
	return "--" + flag
}

// showEnvInHelp ends the help of every flag that has an environment variable (envVars) with
// "env $NAME", unless it says so already.
func showEnvInHelp(root *cobra.Command) {
	for _, ev := range envVars {
		flags := root.PersistentFlags()
		if ev.Command != "" {
			c, _, err := root.Find([]string{ev.Command})
			if err != nil || c == root {
				continue
			}
			flags = c.Flags()
		}
		if f := flags.Lookup(ev.Flag); f != nil && !strings.Contains(f.Usage, "env $"+ev.Name) {
			f.Usage += "; env $" + ev.Name
		}
	}
}

// newLogger returns the logger of every command: JSON lines, or a console writer (the default
// on a terminal) that shows times in local time with their zone.
func newLogger(w io.Writer, format logFormat, level zerolog.Level) zerolog.Logger {
	if format == "" {
		format = "json"
		if isTerminal(w) {
			format = "console"
		}
	}
	out := w
	if format == "console" {
		out = zerolog.ConsoleWriter{Out: w, TimeFormat: consoleTimeFormat, TimeLocation: time.Local,
			NoColor: !isTerminal(w), FormatFieldValue: consoleValue}
	}
	return zerolog.New(out).Level(level).With().Timestamp().Logger()
}

// consoleValue shows a field's value on the console. zerolog quotes every string with a
// character outside printable ASCII; this leaves unquoted those that need no quotes to be read
// back, such as durations in microseconds (took=85µs, not took="85µs").
func consoleValue(v any) string {
	if b, ok := v.([]byte); ok { // a JSON value other than a string: an array, an object
		return string(b)
	}
	s := fmt.Sprint(v)
	if len(s) < 2 || s[0] != '"' {
		return s
	}
	u, err := strconv.Unquote(s)
	if err != nil || u == "" || strings.ContainsAny(u, " \t\\\"=") || strings.ContainsFunc(u, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return s
	}
	return u
}

// checkRedisURL checks that raw parses as a Redis URL (or, with cluster, a cluster seed URL);
// a malformed one is a usage error that says what a good one looks like.
func checkRedisURL(raw, source string, cluster bool) error {
	if err := checkAddrs(raw, source, cluster); err != nil {
		return err
	}
	_, err := parseRedisURL(raw, cluster)
	if err == nil {
		return nil
	}
	if !strings.Contains(raw, "://") {
		return usageErrorf("%s %s has no scheme: did you mean %s?", source, quoteRedacted(raw), redactURL("redis://"+raw))
	}
	msg := strings.TrimPrefix(err.Error(), "redis: ")
	return usageErrorf("%s %s: %s (want redis://host:port/db, rediss:// for TLS, unix:///path or redis://sentinel:26379?master_name=NAME&addr=sentinel2:26379)", source, redactURL(raw), msg)
}

// checkAddrs refuses a URL that names several servers where it cannot. One case is addr
// parameters (a cluster seed list) without --cluster, which go-redis calls an "unexpected
// option". The other is a comma in the host (redis://a:1,b:2). Go-redis takes that as one
// host name that no DNS knows.
// A Sentinel URL (master_name) takes addr parameters as its other sentinels.
func checkAddrs(raw, source string, cluster bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return nil // parseRedisURL says what is wrong
	}
	q := u.Query()
	if strings.Contains(u.Host, ",") {
		return usageErrorf("%s %s names several addresses in its host; a Redis Cluster takes one there and the others as addr parameters, with --cluster (or %s=true): redis://h1:p1?addr=h2:p2",
			source, redactURL(raw), envCluster)
	}
	if q.Has("addr") && !q.Has("master_name") && !cluster {
		return usageErrorf("%s %s names several addresses (addr=), which is a Redis Cluster's seed list: add --cluster (or %s=true); a Sentinel URL also names master_name",
			source, redactURL(raw), envCluster)
	}
	return nil
}

// quoteRedacted shows a URL without a scheme, hiding what may be a password (user:secret@host).
func quoteRedacted(raw string) string {
	if at := strings.LastIndex(raw, "@"); at >= 0 {
		if colon := strings.Index(raw[:at], ":"); colon >= 0 {
			raw = raw[:colon+1] + "xxxxx" + raw[at:]
		}
	}
	return strconv.Quote(raw)
}

// redisChosen reports whether the user named a Redis server (--redis or $CONVEYOR_REDIS_URL)
// rather than leaving the default.
func (a *app) redisChosen() bool { return a.redisExplicit || a.getenv(envRedisURL) != "" }

// redis returns the connection to the configured server, opening it on first use. go-redis
// dials lazily: a bad address shows up as the first command's error.
func (a *app) redis() (redis.UniversalClient, error) {
	if a.rdb == nil {
		rdb, err := a.dial()
		if err != nil {
			return nil, err
		}
		a.rdb = rdb
	}
	return a.rdb, nil
}

// dial opens a new connection to the configured server, with the TLS flags.
func (a *app) dial() (redis.UniversalClient, error) {
	return dial(a.redisURL, a.cluster, a.tls.apply)
}

// client returns a pipeline.Client over the configured server.
func (a *app) client() (*pipeline.Client, error) {
	rdb, err := a.redis()
	if err != nil {
		return nil, err
	}
	return pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: a.prefix, Keys: a.keys})
}

// inspector returns a pipeline.Inspector over the configured server: what every command that
// looks at or administers queues and jobs goes through.
func (a *app) inspector() (*pipeline.Inspector, error) {
	rdb, err := a.redis()
	if err != nil {
		return nil, err
	}
	return pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: a.prefix, Keys: a.keys})
}

func (a *app) close() {
	if a.stopTracing != nil {
		a.stopTracing()
	}
	if a.rdb != nil {
		_ = a.rdb.Close()
	}
}

// dial opens a client for a redis://, rediss:// or unix:// URL, or a cluster client for a
// cluster seed URL. Each configure function adjusts the parsed options (whatever
// parseRedisURL returns) before the client is made: app.dial passes tlsFlags.apply, so a new
// kind of URL gets the TLS flags by tlsConfigOf knowing its options type.
func dial(rawURL string, cluster bool, configure ...func(opt any) error) (redis.UniversalClient, error) {
	opt, err := parseRedisURL(rawURL, cluster)
	if err != nil {
		return nil, usageErrorf("redis URL %s: %s", redactURL(rawURL), strings.TrimPrefix(err.Error(), "redis: "))
	}
	for _, c := range configure {
		if err := c(opt); err != nil {
			return nil, err
		}
	}
	switch opt := opt.(type) {
	case *redis.ClusterOptions:
		return redis.NewClusterClient(opt), nil
	case *redis.FailoverOptions:
		// It asks the sentinels for the master at each new connection, so it follows a
		// failover; commands that fail meanwhile return errors, which callers retry.
		return redis.NewFailoverClient(opt), nil
	default:
		return redis.NewClient(opt.(*redis.Options)), nil
	}
}

// parseRedisURL parses a Redis URL into *redis.Options, with cluster a seed URL into
// *redis.ClusterOptions, and a Sentinel URL (one with master_name, in go-redis's
// ParseFailoverURL form: redis://s1:26379?master_name=mymaster&addr=s2:26379) into
// *redis.FailoverOptions. A Sentinel URL's user and password are the sentinels'; the master's
// are its username and password parameters.
func parseRedisURL(rawURL string, cluster bool) (any, error) {
	if u, err := url.Parse(rawURL); err == nil && u.Query().Has("master_name") {
		if cluster {
			return nil, errors.New("master_name names a Sentinel master, which --cluster does not take (a Sentinel URL needs no --cluster)")
		}
		if u.Query().Get("master_name") == "" {
			return nil, errors.New("master_name is empty: name the master the sentinels monitor")
		}
		return redis.ParseFailoverURL(rawURL)
	}
	if cluster {
		return redis.ParseClusterURL(rawURL)
	}
	return redis.ParseURL(rawURL)
}

// redactURL hides the passwords of a URL for messages: the user's, and the password
// parameter of a Sentinel URL (the master's).
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	if q := u.Query(); q.Get("password") != "" {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
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

// oneArg takes one job id.
var oneArg = exactlyOne("job id")

// exactlyOne is the Args of a command that takes one argument, what.
func exactlyOne(what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usageErrorf("want exactly one %s, got %d arguments", what, len(args))
		}
		return nil
	}
}

// unknownSubcommand is the Args of a command that only groups subcommands (the root, dead):
// run bare it shows help; with an argument that names no subcommand it is a usage error.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return unknownCommandError(cmd, args[0])
}

// unknownCommandError says that typed names no subcommand of cmd, suggesting the nearest.
func unknownCommandError(cmd *cobra.Command, typed string) error {
	msg := fmt.Sprintf("unknown command %q for %q", typed, cmd.CommandPath())
	if s := suggest(cmd, typed); len(s) > 0 {
		msg += " (did you mean " + strings.Join(quoteAll(s), " or ") + "?)"
	}
	return usageError{errors.New(msg)}
}

func quoteAll(ss []string) []string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return q
}

// unknownCommandIn finds, before cobra parses any flag, a word of args that should name a
// subcommand and names none. Cobra would otherwise parse the flags that follow it as the
// parent's, and report one of them as unknown. So "conveyor publsh -t echo" says unknown
// shorthand flag 't', hiding the typo. It walks the words as cobra does. Flags and their
// values are skipped. The first other word under a command with subcommands must name one.
// It gives up (nil) at an unknown flag or "--", which cobra reports as usual.
func unknownCommandIn(root *cobra.Command, args []string) error {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd(args...)
	cmd := root
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			return nil
		}
		if strings.HasPrefix(arg, "-") && arg != "-" {
			takesValue, known := flagTakesValue(cmd, arg)
			if !known {
				return nil
			}
			if takesValue {
				i++
			}
			continue
		}
		if !cmd.HasSubCommands() || cmd == root && (arg == cobra.ShellCompRequestCmd || arg == cobra.ShellCompNoDescRequestCmd) {
			return nil
		}
		// Every command with subcommands takes no other argument (unknownSubcommand).
		sub := findSubcommand(cmd, arg)
		if sub == nil {
			return unknownCommandError(cmd, arg)
		}
		cmd = sub
	}
	return nil
}

func findSubcommand(cmd *cobra.Command, name string) *cobra.Command {
	for _, c := range cmd.Commands() {
		if c.Name() == name || c.HasAlias(name) {
			return c
		}
	}
	return nil
}

// flagTakesValue reports whether the flag word arg (--name, --name=v, -n, -nv, -abc) is known
// to cmd and whether it consumes the next word as its value.
func flagTakesValue(cmd *cobra.Command, arg string) (takesValue, known bool) {
	flags := cmd.Flags()
	flags.AddFlagSet(cmd.InheritedFlags())
	if name, ok := strings.CutPrefix(arg, "--"); ok {
		name, _, hasValue := strings.Cut(name, "=")
		f := flags.Lookup(name)
		if f == nil {
			return false, name == "help"
		}
		return !hasValue && f.NoOptDefVal == "", true
	}
	short := arg[1:]
	for j := 0; j < len(short); j++ {
		f := flags.ShorthandLookup(short[j : j+1])
		if f == nil {
			return false, short[j] == 'h'
		}
		if f.NoOptDefVal == "" {
			// The rest of the word is its value, or the next word is.
			return j == len(short)-1 && !strings.Contains(short, "="), true
		}
	}
	return false, true
}

// suggest returns the subcommands of cmd nearest to typed, among cobra's suggestions (within
// two edits, a prefix, or SuggestFor). Cobra counts edits by Levenshtein distance, where a swap
// of two neighbouring letters is two, and lists every command within reach: "stauts" gets
// "stats" and "status" alike (TestSuggest). This keeps the nearest by optimal string alignment
// distance, where a swap is one, and among equally near those of typed's length (a swap or a
// changed letter is likelier than a missing one), so "stauts" suggests "status" before
// "stats". It returns the best one, or two when they tie.
func suggest(cmd *cobra.Command, typed string) []string {
	cmd.SuggestionsMinimumDistance = 2
	type cand struct {
		name       string
		dist, diff int
	}
	var cands []cand
	lower := strings.ToLower(typed)
	for _, name := range slices.Compact(cmd.SuggestionsFor(typed)) {
		d := osaDistance(lower, strings.ToLower(name))
		if d > 2 { // a prefix, or the command's SuggestFor
			if len(typed) < 2 {
				continue
			}
			d = 1
		}
		cands = append(cands, cand{name, d, abs(len(name) - len(typed))})
	}
	slices.SortStableFunc(cands, func(x, y cand) int {
		if x.dist != y.dist {
			return x.dist - y.dist
		}
		return x.diff - y.diff
	})
	var out []string
	for _, c := range cands {
		if len(out) > 0 && (c.dist != cands[0].dist || c.diff != cands[0].diff) || len(out) == 2 {
			break
		}
		out = append(out, c.name)
	}
	return out
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// osaDistance is the optimal string alignment distance between a and b: the edits (insert,
// delete, substitute, or swap two neighbouring characters) that turn one into the other.
func osaDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// logLevel is the --log-level flag, case-insensitive: a malformed value is a flag error (exit 2).
type logLevel zerolog.Level

var logLevels = []string{"trace", "debug", "info", "warn", "error"}

func (l *logLevel) String() string { return zerolog.Level(*l).String() }
func (l *logLevel) Type() string   { return "level" }

func (l *logLevel) Set(s string) error {
	s = strings.ToLower(strings.TrimSpace(s))
	if !slices.Contains(logLevels, s) {
		return fmt.Errorf("want one of %s", strings.Join(logLevels, ", "))
	}
	lvl, err := zerolog.ParseLevel(s)
	*l = logLevel(lvl)
	return err
}

// logFormat is the --log-format flag: console or json; empty means console on a terminal and
// json otherwise.
type logFormat string

var logFormats = []string{"console", "json"}

func (f *logFormat) String() string { return string(*f) }
func (f *logFormat) Type() string   { return "format" }

func (f *logFormat) Set(s string) error {
	s = strings.ToLower(strings.TrimSpace(s))
	if !slices.Contains(logFormats, s) {
		return fmt.Errorf("want console or json")
	}
	*f = logFormat(s)
	return nil
}

// Errors at the edge.

// describe turns a command's error into what the user reads. It goes by the error's kind and
// operation (pipeline.ErrorKind, pipeline.ErrorOp), never its text. An unreachable or refusing
// Redis is named (redacted) with what to check, after the operation that failed ("stats:
// cannot reach Redis at ..."). The library's package prefixes ("pipeline: invalid argument: ",
// "pipeline: ") are dropped, since they mean nothing on the command line. Any other error's
// text names its operation already.
func (a *app) describe(err error) string {
	url := redactURL(a.redisURL)
	if msg := tlsRefusal(err, url); msg != "" {
		return msg
	}
	op := ""
	if o := pipeline.ErrorOp(err); o != "" {
		op = o + ": "
	}
	if errors.Is(err, pipeline.ErrOutOfMemory) {
		return op + a.outOfMemory(err, url)
	}
	if cause := unreachableCause(err); cause != "" {
		return fmt.Sprintf("%scannot reach Redis at %s: %s; is Redis running there? set --redis or %s", op, url, cause, envRedisURL)
	}
	if pipeline.ErrorKind(err) == "auth" {
		return fmt.Sprintf("%sRedis at %s refused the credentials: %s; check the user and password in --redis or %s",
			op, url, redisMessage(err), envRedisURL)
	}
	if pipeline.ErrorKind(err) == "redirect" && !a.cluster {
		// A cluster node answers a key of another node's slot with MOVED; only a cluster
		// client follows it.
		return fmt.Sprintf("%sRedis at %s is a Redis Cluster node and sent the command to another node (%s): add --cluster (or %s=true)",
			op, url, redisMessage(err), envCluster)
	}
	return pipeline.ErrorMessage(err)
}

// unreachableCause returns, for the failures to reach Redis that a user can act on (a host
// name that does not resolve, a refused or timed-out connection, no answer in time), what
// went wrong; "" for any other error, a cut connection (kind "unreachable" too) among them.
func unreachableCause(err error) string {
	var op *net.OpError
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns):
		if dns.IsNotFound {
			return fmt.Sprintf("no such host %q", dns.Name)
		}
		return dns.Error()
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &op) && op.Op == "dial":
		if op.Timeout() {
			return "connection timed out"
		}
		return pipeline.ErrorMessage(op.Err)
	case errors.As(err, &op) && op.Timeout():
		return "no answer (timed out)"
	}
	return ""
}

// redisMessage is the text of the Redis error in err.
func redisMessage(err error) string {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return rerr.Error()
	}
	return err.Error()
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
	s := tableTime(t)
	if t.IsZero() {
		return s
	}
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
	return t.Local().Format(consoleTimeFormat)
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
