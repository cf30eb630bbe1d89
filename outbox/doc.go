// Package outbox enqueues jobs inside a PostgreSQL transaction: the transactional outbox. A
// job written with Enqueue in the same transaction as the business data it belongs to is
// queued if and only if that transaction commits: a rolled-back order never sends its email.
//
// Enqueue writes one row to the outbox table (conveyor_outbox) through the caller's *sql.Tx
// (database/sql with pgx's stdlib driver, or any driver) or pgx.Tx (wrapped with Pgx). A Relay
// (conveyor relay --postgres URL) moves committed rows into their queues with
// pipeline.Client.EnqueueBatch, then deletes them in the transaction that locked them.
//
// # Exactly one job per committed row
//
// A row's id is its job's id, fixed at Enqueue (WithID, or a new ULID), and the table's
// primary key. The relay sends a batch of rows with those ids (pipeline.WithID) and deletes
// the rows only after Redis answered; the rows stay locked (FOR UPDATE) in between. A relay
// killed in between (SIGKILL, a lost connection, Redis gone) leaves its transaction to roll
// back, so the rows are still there, unlocked, and the next relay sends them again: the
// enqueue script absorbs a job whose id exists (the job is returned as a duplicate, nothing
// new is written), so the re-send makes no second job. The guarantee needs the first job's
// record still in Redis when the re-send comes: a job that finished and whose record expired
// (retention; at least pipeline's MinRetention, one minute by default, even for RetainNone)
// before its row was sent again would run again. A rolled-back transaction leaves no row.
//
// The options are pipeline's that serialize into a row (the spec column, JSON): WithID,
// WithDelay (counted from Enqueue), WithRunAt, WithMaxRetries, WithTimeout, WithUnique,
// WithLimitKey, WithGroup, WithPriority, WithRetention, WithMetadata. pipeline.WithDebounce has
// no counterpart: a debounced job's id is its window's, not the row's, so a re-send could not
// be absorbed. WithReplicas neither: it is the relay's Client's (ClientConfig.Replicas).
//
// An Enqueue of an id that is still in the table writes nothing (ON CONFLICT DO NOTHING): the
// first row's job is the one sent. An Enqueue of an id already relayed writes a row that the
// queue then absorbs, as pipeline.WithID says.
//
// # Several relays
//
// Relays take their batches with SELECT ... FOR UPDATE SKIP LOCKED: each row is locked by one
// relay at a time, so any number of relays may run over one table and each row is sent by the
// one holding it (a row is sent twice only after a relay died with it, see above, and the
// queue absorbs that). Rows are taken oldest first (by insertion order; a row held back after
// the rows never held back), but several relays, a batch sent again or a queue held back do
// not keep a strict order: order within a queue is not a promise of the outbox.
//
// # Wake-up
//
// The table has a statement-level trigger that calls pg_notify('conveyor_outbox') after
// every insert; PostgreSQL delivers the notification when the transaction commits (and never
// when it rolls back). The relay LISTENs and relays at once; it also polls every
// RelayConfig.PollInterval (one second by default), so a lost listening connection delays
// rows by that much at most. Rows written by other programs (plain SQL from any language)
// wake it too.
//
// # Rows that cannot be sent
//
// A row the relay cannot send never holds back the rows behind it. There are three cases.
//
// A row whose job Redis refuses for good (the id names a job with another type or payload,
// ErrConflict; a row written by hand with an invalid queue, type or options; a payload over
// the limit) is set aside, never deleted: the relay writes the reason in its error column (and
// failed_at) and skips it from then on. They are for an operator to read (SELECT id, queue,
// error, failed_at FROM conveyor_outbox WHERE error IS NOT NULL), fix (UPDATE ... SET error =
// NULL sends it again) or delete.
//
// A row whose queue Redis refuses for now (the known queues at their maximum,
// pipeline.ErrTooManyQueues; a queue not created while the relay's Client has RequireQueues,
// pipeline.ErrQueueNotFound) or fails for while it answers a PING (a cluster node down, out
// of memory) is held back: the relay holds its queue back with a backoff of its own (100 ms,
// doubling up to 30 s for a refusal, which an operator's action ends, and 5 s for a failure),
// and writes into each of the queue's rows it locked when it is due again (retry_at), why
// (last_error), when (failed_at) and how often (attempts). Batches select only rows that are
// due (retry_at passed; a row never held back has -infinity), never-held-back ones first, in
// insertion order, on an index of (retry_at, seq): the rows held back cost them nothing, and
// the rows behind them are sent. The queue's rows that arrive during its backoff are held
// back without a try. Once the queue takes its rows again the relay says so. Rows held back
// stay pending: Pending counts them.
//
// Redis not answering at all (not even a PING) holds back no queue: the batch stops, the
// rows it had not sent stay as they were (no row is rewritten at every backoff), and the
// relay backs off as a whole, as for PostgreSQL, logging once.
//
// The relay's log says which queues and rows (up to ten of each per line) and why, at warn
// level when a queue is first held back; RelayBatch and the conveyor_relay_held_back_total
// and conveyor_relay_set_aside_total series (metrics.Relay) count the rows by reason (Reason*,
// a fixed set: the queues of rows refused for too many queues are ones Redis does not know,
// so they are not a label).
//
// # The table
//
// Migrate creates the table, its index and its trigger if they are missing (CREATE ... IF NOT
// EXISTS, under an advisory lock, so concurrent calls are safe) and upgrades a table an older
// Migrate made (the columns of rows held back, added only when missing, and the index); NewRelay's Run calls it
// unless RelayConfig.NoMigrate says the schema is managed elsewhere (the statements are
// Schema). An application that may Enqueue before any relay ran calls Migrate at start: an
// Enqueue into a database without the table fails with ErrNoTable (PostgreSQL's
// undefined_table, 42P01, as pgx reports it), which says how to create it.
// PostgreSQL 14 or newer (CREATE OR REPLACE TRIGGER).
//
// # Why not watermill-sql
//
// Watermill's SQL Pub/Sub (watermill-sql v4) writes messages in the caller's transaction too,
// but its subscriber does not give what the relay needs: it delivers rows one message at a
// time and waits for each ack before the next (no batch for EnqueueBatch), keeps rows forever
// and tracks a consumer group's offset instead (one offsets row, locked by whichever
// subscriber reads: several relays take turns instead of sharing the work), and its uuid
// column is VARCHAR(36), shorter than a job id (128). The outbox table here is the same idea
// (a row per message, written in the business transaction) with the job's id as its key,
// deletion after delivery, and SKIP LOCKED for several relays.
package outbox
