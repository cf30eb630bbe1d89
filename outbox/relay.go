package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/pipeline"
)

// Defaults of RelayConfig.
const (
	DefaultBatchSize    = 500
	DefaultPollInterval = time.Second
	// batchTimeout bounds one batch: its select, its sends to Redis and its delete. A batch
	// in flight when Run's context ends still finishes, within this bound.
	batchTimeout = 30 * time.Second
	// Backoff after a failed batch or a lost listening connection.
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// RelayConfig configures a Relay.
type RelayConfig struct {
	// Postgres is the database's URL or DSN (pgx's syntax:
	// postgres://user:pass@host:5432/db?sslmode=disable). Required.
	Postgres string
	// Client sends the jobs (its Prefix says which Conveyor). Required.
	Client *pipeline.Client
	// BatchSize bounds the rows one batch locks, sends and deletes. Defaults to
	// DefaultBatchSize.
	BatchSize int
	// PollInterval is how often the relay looks for rows when no notification woke it.
	// Defaults to DefaultPollInterval.
	PollInterval time.Duration
	// NoMigrate skips Migrate at Run's start: the schema is managed elsewhere (Schema).
	NoMigrate bool
	// Logger receives the relay's logs; the zero Logger discards them.
	Logger zerolog.Logger
	// OnBatch, when set, hears of each batch that locked rows, after its transaction ended
	// (metrics.Relay turns these into Prometheus series). It runs on the relay's goroutine:
	// keep it quick.
	OnBatch func(RelayBatch)
}

// RelayBatch is what one batch did (RelayConfig.OnBatch).
type RelayBatch struct {
	// Relayed counts rows sent and deleted, Duplicates those of them whose job existed already,
	// SetAside the rows Redis refused for good (left with their error).
	Relayed, Duplicates, SetAside int
	// Lags are the relayed rows' commit-to-queued times: each row's age when the batch
	// locked it, by PostgreSQL's clock (from its insert, which its commit follows closely),
	// plus the batch's own time, from its start to its commit.
	Lags []time.Duration
	// Err is the batch's error: its rows (or a queue's) stay for a later batch.
	Err error
}

// Relay moves committed outbox rows into their queues. Several relays may run over one
// table (see the package doc). Run it, then Close it.
type Relay struct {
	cfg RelayConfig
	pg  *pgx.ConnConfig
	db  *sql.DB
	log zerolog.Logger

	relayed, duplicates, failed atomic.Int64
	// reached says PostgreSQL answered once (Migrate, or a batch's select): Run's goroutine only.
	reached bool
}

// RelayStats counts what a Relay did since it was made.
type RelayStats struct {
	// Relayed counts rows sent and deleted, Duplicates those of them whose job existed
	// already (a row sent again after a relay died with it), Failed the rows set aside
	// with an error (see the package doc).
	Relayed, Duplicates, Failed int64
}

// NewRelay checks cfg and returns a Relay; it connects to nothing yet.
func NewRelay(cfg RelayConfig) (*Relay, error) {
	var errs []error
	if cfg.Client == nil {
		errs = append(errs, errors.New("no Client"))
	}
	if cfg.BatchSize < 0 {
		errs = append(errs, fmt.Errorf("batch size %d is negative", cfg.BatchSize))
	}
	if cfg.PollInterval < 0 {
		errs = append(errs, fmt.Errorf("poll interval %s is negative", cfg.PollInterval))
	}
	var pg *pgx.ConnConfig
	if cfg.Postgres == "" {
		errs = append(errs, errors.New("no Postgres URL"))
	} else {
		var err error
		if pg, err = pgx.ParseConfig(cfg.Postgres); err != nil {
			errs = append(errs, fmt.Errorf("postgres URL: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("outbox: %w: %w", pipeline.ErrInvalid, err)
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	return &Relay{cfg: cfg, pg: pg, db: stdlib.OpenDB(*pg.Copy()), log: cfg.Logger.With().Str("component", "relay").Logger()}, nil
}

// Close closes the relay's connections. Call it after Run returned.
func (r *Relay) Close() error { return r.db.Close() }

// Stats returns the relay's counts.
func (r *Relay) Stats() RelayStats {
	return RelayStats{Relayed: r.relayed.Load(), Duplicates: r.duplicates.Load(), Failed: r.failed.Load()}
}

// Pending counts the rows waiting to be sent (not set aside with an error), committed ones
// only.
func (r *Relay) Pending(ctx context.Context) (int, error) {
	var n int
	err := r.db.QueryRowContext(ctx, `SELECT count(*) FROM `+Table+` WHERE error IS NULL`).Scan(&n)
	return n, err
}

// Run relays rows until ctx ends, then finishes the batch in flight and returns nil. It
// returns an error only when PostgreSQL refuses to create the table (Migrate) at its start (a
// missing permission, a wrong database); other errors, PostgreSQL or Redis unreachable at the
// start as later, are logged and retried with a backoff: a relay started before its database
// (a container's start order) waits for it.
func (r *Relay) Run(ctx context.Context) error {
	if !r.cfg.NoMigrate {
		if err := r.migrate(ctx); err != nil {
			return err
		}
		if ctx.Err() != nil {
			// Stopped while waiting for PostgreSQL: it never started relaying, and says so.
			r.log.Info().Msg("relay stopped before connecting to PostgreSQL")
			return nil
		}
		r.reached = true
	}
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); r.listen(ctx, wake) }()
	defer wg.Wait()
	r.log.Info().Int("batch", r.cfg.BatchSize).Dur("poll", r.cfg.PollInterval).Msg("relay started")
	backoff, failing := time.Duration(0), false
	poll := time.NewTimer(0)
	defer poll.Stop()
	for ctx.Err() == nil {
		n, err := r.batch(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			if !failing {
				r.log.Error().Err(err).Dur("retry_in", backoff).Msg("relay failing")
			} else {
				r.log.Debug().Err(err).Dur("retry_in", backoff).Msg("relay still failing")
			}
			failing = true
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			continue
		case err == nil && failing:
			r.log.Info().Msg("relay back")
			failing, backoff = false, 0
		}
		if n == r.cfg.BatchSize {
			continue // more rows are likely waiting
		}
		poll.Reset(r.cfg.PollInterval)
		select {
		case <-ctx.Done():
		case <-wake:
		case <-poll.C:
		}
	}
	if !r.reached {
		r.log.Info().Msg("relay stopped before connecting to PostgreSQL")
		return nil
	}
	r.log.Info().Msg("relay stopped")
	return nil
}

// listen LISTENs on Channel until ctx ends and wakes Run at each notification, and once each
// time it (re)connects (notifications sent while it was away are lost).
func (r *Relay) listen(ctx context.Context, wake chan<- struct{}) {
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		err := func() error {
			conn, err := pgx.ConnectConfig(ctx, r.pg)
			if err != nil {
				return err
			}
			defer func() {
				cctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_ = conn.Close(cctx)
			}()
			if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
				return err
			}
			backoff = 0
			signal()
			for {
				if _, err := conn.WaitForNotification(ctx); err != nil {
					return err
				}
				signal()
			}
		}()
		if ctx.Err() != nil {
			return
		}
		backoff = min(max(2*backoff, minBackoff), maxBackoff)
		r.log.Debug().Err(err).Dur("retry_in", backoff).Msg("listening connection lost; polling meanwhile")
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
	}
}

// row is one outbox row of a batch.
type row struct {
	id, queue, typ string
	payload        []byte
	spec           spec
	bad            error         // the spec column does not parse
	age            time.Duration // since its insert, when locked (PostgreSQL's clock)
}

// batch locks up to BatchSize rows, sends them and deletes them (or sets aside those Redis
// refuses for good) in one transaction, and returns how many rows it locked. A queue whose
// send fails (Redis unreachable, a queue RequireQueues refuses) keeps its rows for a later
// batch, and its error is returned once the others' rows are deleted. It is not interrupted
// by ctx: a batch begun is finished (within batchTimeout) or rolled back.
func (r *Relay) batch(ctx context.Context) (n int, err error) {
	start := time.Now()
	var report *RelayBatch
	if r.cfg.OnBatch != nil {
		report = &RelayBatch{}
		defer func() {
			if n > 0 || err != nil {
				report.Err = err
				r.cfg.OnBatch(*report)
			}
		}()
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
	defer cancel()
	tx, err := r.db.BeginTx(bctx, nil)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	r.reached = true
	rows, err := r.lock(bctx, tx)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	locked := time.Since(start)
	// By queue, in the order of each queue's first row.
	var queues []string
	byQueue := make(map[string][]*row)
	for i := range rows {
		q := rows[i].queue
		if _, ok := byQueue[q]; !ok {
			queues = append(queues, q)
		}
		byQueue[q] = append(byQueue[q], &rows[i])
	}
	var done []string
	var errs []error // of queues whose rows stay for a later batch
	failed := make(map[string]string)
	dups := 0
	for _, q := range queues {
		var tasks []pipeline.Task
		var sent []*row
		for _, rw := range byQueue[q] {
			t := pipeline.Task{Type: rw.typ, Payload: rw.payload, Opts: rw.spec.options(rw.id)}
			if rw.bad == nil {
				rw.bad = pipeline.Validate(q, t)
			}
			if rw.bad != nil {
				failed[rw.id] = rw.bad.Error()
				continue
			}
			tasks, sent = append(tasks, t), append(sent, rw)
		}
		if len(tasks) == 0 {
			continue
		}
		jobs, err := r.cfg.Client.EnqueueBatch(bctx, q, tasks)
		if refused(err) {
			// Some task was refused for good: a conflict (EnqueueBatch wrote the others),
			// or a Client stricter than Validate (it wrote nothing). Which ones: send them
			// one by one (those written already come back as duplicates).
			for _, rw := range sent {
				_, err := r.cfg.Client.Enqueue(bctx, q, pipeline.Task{Type: rw.typ, Payload: rw.payload}, rw.spec.options(rw.id)...)
				if refused(err) {
					failed[rw.id] = err.Error()
					continue
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("enqueue to %s: %w", q, err))
					break
				}
				// Not counted as a duplicate when it comes back as one: EnqueueBatch wrote it.
				done = append(done, rw.id)
			}
			continue
		}
		if err != nil {
			// This queue's rows stay (unlocked at the commit) for the next batch; the other
			// queues' rows are sent and deleted all the same.
			errs = append(errs, fmt.Errorf("enqueue to %s: %w", q, err))
			continue
		}
		for i, j := range jobs {
			if j != nil && j.Duplicate {
				dups++
			}
			done = append(done, sent[i].id)
		}
	}
	if len(done) > 0 {
		if _, err := tx.ExecContext(bctx, `DELETE FROM `+Table+` WHERE id = ANY($1)`, done); err != nil {
			return 0, fmt.Errorf("delete: %w", err)
		}
	}
	for id, msg := range failed {
		if _, err := tx.ExecContext(bctx, `UPDATE `+Table+` SET error = $2 WHERE id = $1`, id, msg); err != nil {
			return 0, fmt.Errorf("set aside %s: %w", id, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	for id, msg := range failed {
		r.log.Error().Str("job_id", id).Str("reason", msg).Msg("outbox row set aside")
	}
	if report != nil {
		took := time.Since(start)
		report.Relayed, report.Duplicates, report.SetAside = len(done), dups, len(failed)
		sent := make(map[string]bool, len(done))
		for _, id := range done {
			sent[id] = true
		}
		for i := range rows {
			if sent[rows[i].id] {
				report.Lags = append(report.Lags, rows[i].age+took)
			}
		}
	}
	r.relayed.Add(int64(len(done)))
	r.duplicates.Add(int64(dups))
	r.failed.Add(int64(len(failed)))
	if len(done) > 0 {
		r.log.Debug().Int("jobs", len(done)).Int("duplicates", dups).Dur("lock", locked).Dur("took", time.Since(start)).Msg("relayed")
	}
	return len(rows), errors.Join(errs...)
}

// refused reports whether err is Redis's or the Client's final answer for a job, which
// sending it again would not change.
func refused(err error) bool {
	return errors.Is(err, pipeline.ErrConflict) || errors.Is(err, pipeline.ErrInvalid) || errors.Is(err, pipeline.ErrPayloadTooLarge)
}

// lock selects and locks the batch's rows, oldest first, skipping those another relay holds.
func (r *Relay) lock(ctx context.Context, tx *sql.Tx) ([]row, error) {
	res, err := tx.QueryContext(ctx, `SELECT id, queue, type, payload, spec,
EXTRACT(EPOCH FROM clock_timestamp() - created_at)::float8 FROM `+Table+`
WHERE error IS NULL ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED`, r.cfg.BatchSize)
	if err != nil {
		return nil, fmt.Errorf("select: %w", noTable(err))
	}
	defer res.Close()
	var rows []row
	for res.Next() {
		var rw row
		var sp []byte
		var age float64
		if err := res.Scan(&rw.id, &rw.queue, &rw.typ, &rw.payload, &sp, &age); err != nil {
			return nil, fmt.Errorf("select: %w", err)
		}
		rw.age = time.Duration(max(age, 0) * float64(time.Second))
		if err := json.Unmarshal(sp, &rw.spec); err != nil {
			rw.bad = fmt.Errorf("spec: %w", err)
		}
		rows = append(rows, rw)
	}
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("select: %w", err)
	}
	return rows, nil
}

// migrate runs Migrate until it succeeds, ctx ends (nil: Run then stops) or PostgreSQL
// answers with an error of its own (returned: trying again would not help), with the batches'
// backoff between tries while it cannot be reached.
func (r *Relay) migrate(ctx context.Context) error {
	for backoff := time.Duration(0); ; {
		err := Migrate(ctx, r.db)
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			if backoff > 0 {
				r.log.Info().Msg("relay reached PostgreSQL")
			}
			return nil
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &pgErr):
			return err
		}
		if backoff == 0 {
			r.log.Error().Err(err).Msg("relay cannot reach PostgreSQL; retrying")
		}
		backoff = min(max(2*backoff, minBackoff), maxBackoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
}
