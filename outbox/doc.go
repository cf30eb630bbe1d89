// Package outbox enqueues jobs inside a PostgreSQL transaction: the transactional outbox. A job
// written with Enqueue in the same transaction as its business data is queued if and only if
// that transaction commits. A rolled-back order never sends its email.
//
// Enqueue writes one row to the outbox table (conveyor_outbox) through the caller's transaction.
// That is a *sql.Tx (database/sql with pgx's stdlib driver, or any driver) or a pgx.Tx wrapped
// with Pgx. A Relay (conveyor relay --postgres URL) moves committed rows into their queues with
// pipeline.Client.EnqueueBatch. It deletes them in the transaction that locked them.
//
// # Exactly one job per committed row
//
// A row's id is its job's id and the table's primary key. Enqueue fixes it (WithID, or a new
// ULID). The relay sends a batch of rows with those ids (pipeline.WithID). It deletes the rows
// only after Redis answered; the rows stay locked (FOR UPDATE) in between.
//
// A relay may be killed in between: SIGKILL, a lost connection, Redis gone. Its transaction
// rolls back, so the rows are still there, unlocked, and the next relay sends them again. The
// enqueue script absorbs a job whose id exists: the job is returned as a duplicate, and nothing
// new is written. So the re-send makes no second job.
//
// The guarantee needs the first job's record still in Redis when the re-send comes. A job whose
// record expired before its row was sent again would run again. Records are kept for their
// retention: at least pipeline's MinRetention, one minute by default, even for RetainNone. A
// rolled-back transaction leaves no row.
//
// The options are pipeline's that serialize into a row (the spec column, JSON): WithID,
// WithDelay (counted from Enqueue), WithRunAt, WithMaxRetries, WithTimeout, WithUnique,
// WithLimitKey, WithGroup, WithPriority, WithRetention, WithMetadata. pipeline.WithDebounce has
// no counterpart. A debounced job's id is its window's, not the row's, so a re-send could not be
// absorbed. WithReplicas has none either: it is the relay's Client's (ClientConfig.Replicas).
//
// An Enqueue of an id that is still in the table writes nothing (ON CONFLICT DO NOTHING). The
// first row's job is the one sent. An Enqueue of an id already relayed writes a row that the
// queue then absorbs, as pipeline.WithID says.
//
// # Several relays
//
// Relays take their batches with SELECT ... FOR UPDATE SKIP LOCKED. Each row is locked by one
// relay at a time. So any number of relays may run over one table, and each row is sent by the
// one holding it. A row is sent twice only after a relay died with it (see above), and the queue
// absorbs that.
//
// Rows are taken oldest first by insertion order, rows never held back first. But several
// relays, a batch sent again or a queue held back do not keep a strict order. Order within a
// queue is not a promise of the outbox.
//
// # Wake-up
//
// The table has a statement-level trigger that calls pg_notify('conveyor_outbox') after every
// insert. PostgreSQL delivers the notification when the transaction commits, and never when it
// rolls back. The relay LISTENs and relays at once. It also polls every RelayConfig.PollInterval
// (one second by default), so a lost listening connection delays rows by that much at most. Rows
// written by other programs wake it too.
//
// # Rows that cannot be sent
//
// A row the relay cannot send never holds back the rows behind it. There are three cases.
//
// Set aside: Redis refuses the row's job for good. The id may name a job with another type or
// payload (ErrConflict). A row written by hand may have an invalid queue, type or options. The
// payload may be over the limit. Such a row is never deleted. The relay writes the reason in its
// error column, and failed_at, and skips it from then on. An operator reads them (SELECT id,
// queue, error, failed_at FROM conveyor_outbox WHERE error IS NOT NULL). He fixes one (UPDATE
// ... SET error = NULL sends it again) or deletes it.
//
// Held back: Redis refuses the row's queue for now, or fails while it answers a PING. A refusal
// is the known queues at their maximum (pipeline.ErrTooManyQueues), or a queue not created while
// the relay's Client has RequireQueues (pipeline.ErrQueueNotFound). A failure is a cluster node
// down, or Redis out of memory. The relay holds the queue back with a backoff of its own. That
// is 100 ms, doubling up to 30 s, for a refusal, which an operator's action ends; and 5 s for a
// failure.
//
// The relay writes into each of the queue's rows it locked when it is due again (retry_at), why
// (last_error), when (failed_at) and how often (attempts). Batches select only rows that are
// due: retry_at passed, where a row never held back has -infinity. Those come first, in
// insertion order, on an index of (retry_at, seq). So the rows held back cost the batches
// nothing, and the rows behind them are sent. The queue's rows that arrive during its backoff
// are held back without a try. Once the queue takes its rows again the relay says so. Rows held
// back stay pending: Pending counts them.
//
// Redis down: when Redis does not answer at all (not even a PING), no queue is held back. The
// batch stops, and the rows it had not sent stay as they were; no row is rewritten at every
// backoff. The relay backs off as a whole, as for PostgreSQL, logging once.
//
// The relay's log says which queues and rows, up to ten of each per line, and why. It logs at
// warn level when a queue is first held back. RelayBatch and the conveyor_relay_held_back_total
// and conveyor_relay_set_aside_total series (metrics.Relay) count the rows by reason. The
// reasons are a fixed set (Reason*). The queue is not a label: Redis does not know the queues
// refused as too many.
//
// # The table
//
// Migrate creates the table, index and trigger when missing. It uses CREATE ... IF NOT EXISTS
// under an advisory lock, so concurrent calls are safe. It upgrades a table an older Migrate
// made: it adds the columns of rows held back, and the index, when missing. NewRelay's Run calls
// it, unless RelayConfig.NoMigrate says the schema is managed elsewhere. Schema holds the
// statements.
//
// An application that may Enqueue before any relay ran calls Migrate at start. An Enqueue into a
// database without the table fails with ErrNoTable, which says how to create it. That is
// PostgreSQL's undefined_table, 42P01, as pgx reports it.
//
// The outbox needs PostgreSQL 14 or newer, for CREATE OR REPLACE TRIGGER.
//
// # Encryption at rest
//
// With WithKeys, Enqueue seals the payload (package keyring) before it writes the row, bound to
// the row's id, which is the job's. The table, its WAL and its backups then hold ciphertext. The
// relay's Client sends a sealed payload as it is; with pipeline.ClientConfig.Keys of its own it
// seals the rows written without (conveyor relay --keys). The type, the options (spec) and the
// metadata stay plain.
//
// Give the relay the keys when keys rotate. A row the relay sent and did not delete (it died
// in between) is sent again by the next relay; if Rotate re-sealed the row, or
// pipeline.Inspector.RotateKeys its job, in between, the two copies are one plaintext under two
// keys. A Client with the keys opens both and finds the job (a duplicate); one without compares
// the bytes and the row is set aside as a conflict.
//
// # Why not watermill-sql
//
// Watermill's SQL Pub/Sub (watermill-sql v4) writes messages in the caller's transaction too.
// But its subscriber does not give what the relay needs. It delivers rows one message at a time,
// and waits for each ack before the next: no batch for EnqueueBatch. It keeps rows forever, and
// tracks a consumer group's offset instead, in one offsets row. Whichever subscriber reads locks
// that row, so several relays take turns instead of sharing the work. Its uuid column is
// VARCHAR(36), shorter than a job id (128).
//
// The outbox table here is the same idea: a row per message, written in the business
// transaction. It adds the job's id as its key, deletion after delivery, and SKIP LOCKED for
// several relays.
package outbox
