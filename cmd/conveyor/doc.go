// Command conveyor is the command-line tool of Conveyor: it runs workers, publishes jobs and
// inspects queues on Redis (standalone, TLS with rediss://, or a cluster with --cluster).
//
//	conveyor worker  [--queue Q]... [--concurrency N] [--backoff-base DUR] [--backoff-max DUR]
//	conveyor publish [--queue Q] --type T [--payload JSON|@file|@-] [--delay DUR] [--max-retries N] [--id ID] [--count N]
//	conveyor status  [--queue Q] ID [--json]
//	conveyor stats   [--queue Q | --all] [--json]
//	conveyor dead    list|replay|purge
//	conveyor cancel  [--queue Q] ID
//	conveyor bench   [--jobs N] [--payload-bytes B] [--concurrency C] [--mode live|drain] [--json]
//	conveyor demo
//
// Global flags: --redis URL (default $CONVEYOR_REDIS_URL, else redis://127.0.0.1:6379/0),
// --cluster, --prefix (default conveyor), --log-level (default info; logs go to stderr).
//
// # Output and exit codes
//
// Results go to stdout (ids one per line, or one JSON value with --json); logs, progress and
// errors go to stderr, errors as "conveyor: <message>". The exit code is 0 on success, 1 when
// input is refused, a job is unknown or not in the expected state, or Redis fails, and 2 on a
// usage error (unknown command or flag, missing required flag, wrong argument count, malformed
// flag value). A worker stopped by SIGINT or SIGTERM drains and exits 0.
//
// # Layout
//
// main.go maps signals and errors to the process; root.go holds the global flags, the Redis
// connection and output helpers; every subcommand is one file that adds itself to the root
// from its init function, so a new subcommand (serve, say) is one new file. Commands parse,
// validate and print; the work goes through pipeline.Client and pipeline.Worker, except the
// removal of bench's and the demo's throwaway queues, which deletes their keys directly.
package main
