// Command conveyor is the command-line tool of Conveyor. It runs workers, publishes jobs and
// inspects queues on Redis. Redis may be standalone, TLS with rediss://, or a cluster with
// --cluster.
//
// # Commands
//
// Run "conveyor help" for the list of commands.
// Run "conveyor help <command>" for one command's flags.
// The help is made from the commands themselves. So it cannot drift from them, as a list
// here would.
//
// # Global flags
//
// Each global flag has an environment variable, which the flag overrides.
//
// The flag --redis URL names the Redis server ($CONVEYOR_REDIS_URL). It defaults to
// redis://127.0.0.1:6379/0. The flag --cluster makes that URL a cluster's seed
// ($CONVEYOR_CLUSTER). The flag --prefix starts every key ($CONVEYOR_PREFIX, default
// conveyor).
//
// The flags --tls-ca FILE, --tls-cert FILE, --tls-key FILE and --tls-server-name NAME set up
// TLS for rediss:// URLs. Their variables are $CONVEYOR_TLS_CA, $CONVEYOR_TLS_CERT,
// $CONVEYOR_TLS_KEY and $CONVEYOR_TLS_SERVER_NAME.
//
// The flag --log-level ($CONVEYOR_LOG_LEVEL) is trace, debug, info, warn or error, in any
// case. It defaults to info. The flag --log-format ($CONVEYOR_LOG_FORMAT) is console or json.
// It defaults to console when stderr is a terminal, and to json otherwise.
//
// Every variable the binary reads is listed in envVars in root.go.
//
// # Output
//
// Results go to stdout: ids one per line, or one JSON value with --json. Logs, progress and
// errors go to stderr. An error reads "conveyor: <message>" and says what to do next. An
// unreachable Redis is named by its URL (password hidden), with the flag and variable that
// set it.
//
// # Exit codes
//
// Exit code 0 means done.
//
// Exit code 1 means the system refused. Examples are a job not found or not in the expected
// state, a payload over the limit, and a conflicting job. So are a busy queue, and Redis down
// or refusing.
//
// Exit code 2 is a usage error: the command line cannot run as written. Examples are an
// unknown command or flag, a missing required flag, and a wrong argument count. So are a
// malformed or out-of-range value, and flags that cannot go together. So is a queue name, job
// type or id the library refuses as invalid.
//
// Exit code 130 means interrupted: SIGINT or SIGTERM arrived before the command finished. The
// demo cleans up first.
//
// The worker is the exception to 130, since a signal is its normal way to end. After SIGINT or
// SIGTERM it drains and exits 0. Running jobs get --shutdown-timeout to finish, and what does
// not finish is put back. A second signal ends any command at once.
//
// # Logs
//
// Logs are zerolog lines on stderr. JSON lines carry "time", "level", "message" and fields.
// The time is in UTC to the millisecond (2026-11-26T09:12:03.123Z). The console shows local
// time with the date and zone (2026-11-26 09:12:03.123 UTC INF ...).
//
// Durations carry their unit in both formats (took=2.501s, retry_in=756ms). In JSON they are
// strings, never bare numbers. Every line about a job has queue, job_id, type and attempt.
//
// Background parts add a component field: subscriber, scheduler, recoverer or completer. The
// component router carries Watermill's own messages, which stay at debug and below.
//
// While Redis is unreachable, each component logs one error line per backoff step, with the
// real retry_in. It logs one "reconnected to Redis after 5.2s" line when Redis is back.
//
// # Layout
//
// main.go maps signals to a context and returns internal/cli's exit code. The commands live in
// internal/cli. Its root.go holds the global flags, the logger and the Redis connection. It
// also holds what errors read like at the edge, and output helpers.
//
// Every subcommand is one file that adds itself to the root from its init function. So a new
// subcommand is one new file. Commands parse, validate and print. The work goes through
// pipeline.Client, pipeline.Worker and pipeline.Inspector. The HTTP API shares them, for
// example the doctor's checks and a purge's dry run. The tests here build the binary and drive
// it as a user would.
package main
