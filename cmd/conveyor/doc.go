// Command conveyor is the command-line tool of Conveyor: it runs workers, publishes jobs and
// inspects queues on Redis (standalone, TLS with rediss://, or a cluster with --cluster).
//
//	conveyor worker     [--queue Q]... [--concurrency N] [--backoff-base DUR] [--backoff-max DUR]
//	conveyor publish    [--queue Q] --type T [--payload JSON|@file|@-] [--delay DUR] [--max-retries N] [--id ID] [--count N] [--json]
//	conveyor status     [--queue Q] ID [--json]
//	conveyor cancel     [--queue Q] ID [--json]
//	conveyor stats      [--queue Q | --all] [--json]
//	conveyor queues     [--json]; conveyor queues create Q [--partitions P]; conveyor queues delete Q [--force]
//	conveyor list       [--queue Q] --status S [--limit N] [--cursor C] [--json]
//	conveyor dead list    [--queue Q] [--limit N] [--cursor C] [--json]
//	conveyor dead replay  [--queue Q] (ID... | --all) [--json]
//	conveyor dead purge   [--queue Q] (ID... | --all [--older-than DUR]) [--dry-run] [--json]
//	conveyor serve      [--addr A] [--auth-token T] [--insecure] [--allowed-host H]... [--max-queues N] [--create-queues=false] [--max-wait DUR]
//	conveyor doctor     [--json]
//	conveyor handlers   [--json]
//	conveyor bench      [--jobs N] [--payload-bytes B] [--concurrency C] [--mode live|drain] [--json]
//	conveyor demo       [--serve ADDR] [--produce-only [--queue Q] [--every DUR] [--count N]]
//	conveyor version    [--json]
//	conveyor completion bash|zsh|fish|powershell
//
// Global flags, each with an environment variable that the flag overrides: --redis URL
// ($CONVEYOR_REDIS_URL, default redis://127.0.0.1:6379/0), --cluster ($CONVEYOR_CLUSTER),
// --prefix ($CONVEYOR_PREFIX, default conveyor), --log-level ($CONVEYOR_LOG_LEVEL: trace,
// debug, info, warn or error, in any case; default info), --log-format
// ($CONVEYOR_LOG_FORMAT: console or json; default console when stderr is a terminal, json
// otherwise), and for rediss:// --tls-ca FILE ($CONVEYOR_TLS_CA), --tls-cert FILE and
// --tls-key FILE ($CONVEYOR_TLS_CERT, $CONVEYOR_TLS_KEY) and --tls-server-name
// ($CONVEYOR_TLS_SERVER_NAME). envVars in root.go lists every variable the binary reads.
//
// # Output and exit codes
//
// Results go to stdout (ids one per line, or one JSON value with --json); logs, progress and
// errors go to stderr, errors as "conveyor: <message>", saying what to do next: an
// unreachable Redis is named by its URL (password hidden) with the flag and variable that set
// it. The exit codes:
//
//	0    done
//	1    refused by the system: a job not found or not in the expected state, a payload over
//	     the limit, a conflicting job, a busy queue, Redis down or refusing
//	2    usage: the command line cannot run as written (an unknown command or flag, a missing
//	     required flag, a wrong argument count, a malformed or out-of-range value, flags that
//	     cannot go together, a queue name, job type or id the library refuses as invalid)
//	130  interrupted: SIGINT or SIGTERM arrived before the command finished (the demo cleans
//	     up first)
//
// The worker is the exception to 130: a signal is its normal way to end, so after SIGINT or
// SIGTERM it drains (running jobs get --shutdown-timeout to finish; what does not finish is
// put back) and exits 0. A second signal ends any command at once.
//
// # Logs
//
// Logs are zerolog lines on stderr. JSON lines carry "time" in UTC to the millisecond
// (2026-11-26T09:12:03.123Z), "level", "message" and fields; the console shows local time with
// the date and zone (2026-11-26 09:12:03.123 UTC INF ...). Durations carry their unit in
// both (took=2.501s, retry_in=756ms; JSON strings, never bare numbers). Every line about a job
// has queue, job_id, type and attempt; background parts add component (subscriber, scheduler,
// recoverer, completer; router for Watermill's own messages, which stay at debug and below).
// While Redis is unreachable each component logs one error line per backoff step, with the
// real retry_in, and one "reconnected to Redis after 5.2s" line when it is back.
//
// # Layout
//
// main.go maps signals to a context and returns internal/cli's exit code; the commands live in
// internal/cli (root.go holds the global flags, the logger, the Redis connection, what errors
// read like at the edge and output helpers; every subcommand is one file that adds itself to
// the root from its init function, so a new subcommand is one new file). Commands parse,
// validate and print; the work goes through pipeline.Client, pipeline.Worker and
// pipeline.Inspector, which the HTTP API shares (the doctor's checks, a purge's dry run). The
// tests here build the binary and drive it as a user would.
package main
