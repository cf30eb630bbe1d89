package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/conveyorq/conveyor/internal/tracing"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
)

// Table is the outbox table's name (in the connection's search_path), and Channel the
// channel its trigger notifies.
const (
	Table   = "conveyor_outbox"
	Channel = "conveyor_outbox"
)

// Schema is the statements Migrate runs, in order, for those who manage the schema with their
// own migrations. They upgrade a table made by an older Migrate as well. They add its columns
// for rows held back (attempts, retry_at, last_error, failed_at). They replace the old index on
// seq alone with the one the relay selects with, (retry_at, seq).
var Schema = []string{
	`CREATE TABLE IF NOT EXISTS ` + Table + ` (
	seq        BIGINT GENERATED ALWAYS AS IDENTITY,
	id         TEXT PRIMARY KEY,
	queue      TEXT NOT NULL,
	type       TEXT NOT NULL,
	payload    BYTEA NOT NULL DEFAULT ''::bytea,
	spec       JSONB NOT NULL DEFAULT '{}'::jsonb,
	created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
	error      TEXT,
	attempts   INTEGER NOT NULL DEFAULT 0,
	retry_at   TIMESTAMPTZ NOT NULL DEFAULT '-infinity',
	last_error TEXT,
	failed_at  TIMESTAMPTZ
)`,
	addColumns,
	`CREATE INDEX IF NOT EXISTS ` + Table + `_due ON ` + Table + ` (retry_at, seq) WHERE error IS NULL`,
	`DROP INDEX IF EXISTS ` + Table + `_pending`,
	`CREATE OR REPLACE FUNCTION ` + Table + `_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('` + Channel + `', '');
	RETURN NULL;
END
$$`,
	`CREATE OR REPLACE TRIGGER ` + Table + `_notify AFTER INSERT ON ` + Table + `
	FOR EACH STATEMENT EXECUTE FUNCTION ` + Table + `_notify()`,
}

// addColumns upgrades a table made before rows could be held back. Migrate runs it only when
// a column is missing: ALTER TABLE takes the table's strongest lock even when it has nothing
// to add, and would queue every Enqueue behind the longest open transaction that wrote a row.
// The defaults are constants, so PostgreSQL adds the columns without rewriting the table.
const addColumns = `ALTER TABLE ` + Table + `
	ADD COLUMN IF NOT EXISTS attempts INTEGER NOT NULL DEFAULT 0,
	ADD COLUMN IF NOT EXISTS retry_at TIMESTAMPTZ NOT NULL DEFAULT '-infinity',
	ADD COLUMN IF NOT EXISTS last_error TEXT,
	ADD COLUMN IF NOT EXISTS failed_at TIMESTAMPTZ`

// columnsMissing counts the columns of addColumns the table lacks.
const columnsMissing = `SELECT 4 - count(*) FROM pg_attribute
WHERE attrelid = to_regclass('` + Table + `') AND NOT attisdropped
AND attname IN ('attempts', 'retry_at', 'last_error', 'failed_at')`

// ErrNoTable is the error (wrapped with PostgreSQL's) of an Enqueue, or of a relay's batch,
// in a database where the outbox table does not exist: Migrate (or a relay started without
// RelayConfig.NoMigrate, `conveyor relay` without --no-migrate) creates it.
var ErrNoTable = errors.New("the outbox table " + Table + " does not exist: create it with outbox.Migrate(ctx, db) " +
	"at the application's start, or start conveyor relay (without --no-migrate) first, or apply outbox.Schema")

// undefinedTable is PostgreSQL's SQLSTATE for a relation that does not exist.
const undefinedTable = "42P01"

// noTable wraps err with ErrNoTable when PostgreSQL answered that a relation is missing (as pgx
// reports it: *pgconn.PgError). So the first Enqueue of a new application says what to do, not
// only PostgreSQL's words.
func noTable(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == undefinedTable {
		return fmt.Errorf("%w: %w", ErrNoTable, err)
	}
	return err
}

// migrateLock is the advisory lock Migrate holds: concurrent CREATE ... IF NOT EXISTS of one
// table can fail on a unique index of the catalog.
const migrateLock = 0x636f6e76 // "conv"

// Migrate creates the outbox table, its index and its trigger when they are missing, and
// upgrades a table an older Migrate made (see Schema). It is safe to call from several
// processes at once and again at every start.
func Migrate(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outbox: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLock); err != nil {
		return fmt.Errorf("outbox: migrate: %w", err)
	}
	for _, q := range Schema {
		if q == addColumns {
			var missing int
			if err := tx.QueryRowContext(ctx, columnsMissing).Scan(&missing); err != nil {
				return fmt.Errorf("outbox: migrate: %w", err)
			}
			if missing == 0 {
				continue
			}
		}
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("outbox: migrate: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outbox: migrate: %w", err)
	}
	return nil
}

// Execer is what Enqueue writes through: a *sql.Tx, or Pgx(tx) for a pgx.Tx. A *sql.DB or
// *sql.Conn works too, but only a transaction makes the job depend on the business data's
// commit.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Pgx adapts a pgx transaction (pgx.Tx, or a pgx.Conn or pool) for Enqueue.
func Pgx(tx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}) Execer {
	return pgxExecer{tx}
}

// Pgx takes pgx.Tx's method set; the assertion keeps it honest.
var _ = Pgx(pgx.Tx(nil))

type pgxExecer struct {
	tx interface {
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	}
}

func (p pgxExecer) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	tag, err := p.tx.Exec(ctx, query, args...)
	return pgxResult(tag), err
}

type pgxResult pgconn.CommandTag

func (r pgxResult) LastInsertId() (int64, error) {
	return 0, errors.New("outbox: no LastInsertId in PostgreSQL")
}
func (r pgxResult) RowsAffected() (int64, error) { return pgconn.CommandTag(r).RowsAffected(), nil }

// spec is a row's options, the spec column: what of pipeline's options serializes. Times and
// durations are in milliseconds, so that other languages may write rows too.
type spec struct {
	RunAtMS     int64             `json:"run_at_ms,omitempty"` // Unix milliseconds
	MaxRetries  *int              `json:"max_retries,omitempty"`
	TimeoutMS   int64             `json:"timeout_ms,omitempty"`
	UniqueKey   string            `json:"unique_key,omitempty"`
	UniqueTTLMS int64             `json:"unique_ttl_ms,omitempty"`
	LimitKey    string            `json:"limit_key,omitempty"`
	Group       string            `json:"group,omitempty"`
	Priority    int               `json:"priority,omitempty"`
	RetentionMS *int64            `json:"retention_ms,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

// options are Enqueue's options as given.
type options struct {
	id     string
	keys   *keyring.Keyring
	delay  *time.Duration
	runAt  *time.Time
	spec   spec
	plOpts []pipeline.Option // the same, as pipeline's, for validation
}

// Option sets how a job is enqueued: pipeline's options that serialize into a row. They are
// checked by Enqueue, before it writes: a bad value is an error wrapping pipeline.ErrInvalid.
type Option func(*options)

// WithID sets the job's id (pipeline.WithID) instead of a new ULID: the row's key, so an
// Enqueue of the same id again is absorbed (see the package doc).
func WithID(id string) Option { return func(o *options) { o.id = id } }

// WithKeys seals the payload with k (pipeline.ClientConfig.Keys) before the row is written,
// bound to the row's id, the job's: the table, its WAL and backups hold ciphertext only. The
// relay sends the sealed payload as it is, so its own keyring need not have the key, but the
// workers' must (and the relay's, to find a job sent before a rotation: see the package doc's
// "Encryption at rest"). The type, the options and the metadata stay plain. A nil k seals
// nothing.
func WithKeys(k *keyring.Keyring) Option { return func(o *options) { o.keys = k } }

// WithDelay makes the job due d after Enqueue (not after the commit, nor the relay's send).
func WithDelay(d time.Duration) Option {
	return func(o *options) { o.delay = &d; o.plOpts = append(o.plOpts, pipeline.WithDelay(d)) }
}

// WithRunAt makes the job due at t (pipeline.WithRunAt).
func WithRunAt(t time.Time) Option {
	return func(o *options) { o.runAt = &t; o.plOpts = append(o.plOpts, pipeline.WithRunAt(t)) }
}

// WithMaxRetries sets the job's retries (pipeline.WithMaxRetries); without it the relay's
// Client's default applies.
func WithMaxRetries(n int) Option {
	return func(o *options) { o.spec.MaxRetries = &n; o.plOpts = append(o.plOpts, pipeline.WithMaxRetries(n)) }
}

// WithTimeout bounds each attempt (pipeline.WithTimeout), in whole milliseconds.
func WithTimeout(d time.Duration) Option {
	return func(o *options) {
		o.spec.TimeoutMS = ceilMS(d)
		o.plOpts = append(o.plOpts, pipeline.WithTimeout(d))
	}
}

// WithUnique de-duplicates by key (pipeline.WithUnique); ttl is counted from the relay's send.
// A row whose key a live job holds when it is sent makes no job of its own: the relay deletes
// it and counts it in RelayStats.Duplicates.
func WithUnique(key string, ttl time.Duration) Option {
	return func(o *options) {
		o.spec.UniqueKey, o.spec.UniqueTTLMS = key, ceilMS(ttl)
		o.plOpts = append(o.plOpts, pipeline.WithUnique(key, ttl))
	}
}

// WithLimitKey sets the key the queue's per-key limits count the job under (pipeline.WithLimitKey).
func WithLimitKey(key string) Option {
	return func(o *options) { o.spec.LimitKey = key; o.plOpts = append(o.plOpts, pipeline.WithLimitKey(key)) }
}

// WithGroup puts the job in a fair group of its queue (pipeline.WithGroup).
func WithGroup(group string) Option {
	return func(o *options) { o.spec.Group = group; o.plOpts = append(o.plOpts, pipeline.WithGroup(group)) }
}

// WithPriority sets the job's priority level (pipeline.WithPriority).
func WithPriority(p int) Option {
	return func(o *options) { o.spec.Priority = p; o.plOpts = append(o.plOpts, pipeline.WithPriority(p)) }
}

// WithRetention sets how long the job's record is kept after it finishes (pipeline.WithRetention).
func WithRetention(d time.Duration) Option {
	return func(o *options) {
		ms := ceilMS(d)
		o.spec.RetentionMS = &ms
		o.plOpts = append(o.plOpts, pipeline.WithRetention(d))
	}
}

// WithMetadata adds metadata pairs over the task's own (pipeline.WithMetadata).
func WithMetadata(md map[string]string) Option {
	return func(o *options) {
		if o.spec.Metadata == nil {
			o.spec.Metadata = make(map[string]string, len(md))
		}
		for k, v := range md {
			o.spec.Metadata[k] = v
		}
		o.plOpts = append(o.plOpts, pipeline.WithMetadata(md))
	}
}

// ceilMS is d in whole milliseconds, rounded up (pipeline rounds timeouts up too).
func ceilMS(d time.Duration) int64 {
	ms := d.Milliseconds()
	if d > 0 && d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

const insertRow = `INSERT INTO ` + Table + ` (id, queue, type, payload, spec) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (id) DO NOTHING`

// Enqueue writes the job into the outbox table through tx and returns its id. A Relay queues the
// job once tx commits, and never if it rolls back.
//
// The queue, the task and the options are checked first, as pipeline.Client.Enqueue checks them
// (pipeline.Validate). The payload limit is 1 MiB, a Client's default. A bad one is an
// error and nothing is written. task.Opts must be empty, because pipeline's options do not
// serialize: pass this package's options instead. An id already in the table (an Enqueue sent
// again) writes nothing and returns the id.
func Enqueue(ctx context.Context, tx Execer, queue string, task pipeline.Task, opts ...Option) (string, error) {
	if len(task.Opts) > 0 {
		return "", fmt.Errorf("%w: task.Opts are pipeline's options, which an outbox row cannot carry: use outbox's", pipeline.ErrInvalid)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	now := time.Now()
	if o.id == "" {
		o.id = pipeline.NewID()
	}
	pl := append([]pipeline.Option{pipeline.WithID(o.id)}, o.plOpts...)
	if err := pipeline.Validate(queue, task, pl...); err != nil {
		return "", fmt.Errorf("outbox: %w", err)
	}
	due := o.runAt
	if o.delay != nil && *o.delay > 0 {
		t := now.Add(*o.delay)
		due = &t
	}
	if due != nil {
		// In whole milliseconds, rounded up, as pipeline stores due times.
		o.spec.RunAtMS = due.UnixMilli()
		if due.Nanosecond()%int(time.Millisecond) != 0 {
			o.spec.RunAtMS++
		}
	}
	// The task's metadata goes in spec too, under WithMetadata's, as pipeline merges them.
	if len(task.Metadata) > 0 {
		merged := make(map[string]string, len(task.Metadata)+len(o.spec.Metadata))
		for k, v := range task.Metadata {
			merged[k] = v
		}
		for k, v := range o.spec.Metadata {
			merged[k] = v
		}
		o.spec.Metadata = merged
	}
	// The caller's trace context goes with the row: its span, the request that commits the row.
	// So the job's spans join the caller's trace however late the relay sends it. A task that
	// carries its own is left alone.
	if o.spec.Metadata[tracing.KeyTraceparent] == "" {
		tc := map[string]string{}
		if tracing.Inject(ctx, tc); tc[tracing.KeyTraceparent] != "" {
			if o.spec.Metadata == nil {
				o.spec.Metadata = map[string]string{}
			}
			for k, v := range tc {
				o.spec.Metadata[k] = v
			}
		}
	}
	sp, err := json.Marshal(o.spec)
	if err != nil {
		return "", fmt.Errorf("outbox: %w", err)
	}
	payload := o.keys.Seal(keyring.Payload, o.id, task.Payload) // after the checks: the limit is the plaintext's
	if payload == nil {
		payload = []byte{}
	}
	if _, err := tx.ExecContext(ctx, insertRow, o.id, queue, task.Type, payload, string(sp)); err != nil {
		return "", fmt.Errorf("outbox: enqueue to %s: %w", queue, noTable(err))
	}
	return o.id, nil
}

// options returns the pipeline options of a row's spec and id.
func (s *spec) options(id string) []pipeline.Option {
	opts := []pipeline.Option{pipeline.WithID(id)}
	if s.RunAtMS > 0 {
		opts = append(opts, pipeline.WithRunAt(time.UnixMilli(s.RunAtMS)))
	}
	if s.MaxRetries != nil {
		opts = append(opts, pipeline.WithMaxRetries(*s.MaxRetries))
	}
	if s.TimeoutMS != 0 {
		opts = append(opts, pipeline.WithTimeout(time.Duration(s.TimeoutMS)*time.Millisecond))
	}
	if s.UniqueKey != "" || s.UniqueTTLMS != 0 {
		opts = append(opts, pipeline.WithUnique(s.UniqueKey, time.Duration(s.UniqueTTLMS)*time.Millisecond))
	}
	if s.LimitKey != "" {
		opts = append(opts, pipeline.WithLimitKey(s.LimitKey))
	}
	if s.Group != "" {
		opts = append(opts, pipeline.WithGroup(s.Group))
	}
	if s.Priority != 0 {
		opts = append(opts, pipeline.WithPriority(s.Priority))
	}
	if s.RetentionMS != nil {
		opts = append(opts, pipeline.WithRetention(time.Duration(*s.RetentionMS)*time.Millisecond))
	}
	if len(s.Metadata) > 0 {
		opts = append(opts, pipeline.WithMetadata(s.Metadata))
	}
	return opts
}
