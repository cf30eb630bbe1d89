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
	// Backoff after a failed batch or a lost listening connection. Also the first and the
	// longest backoff of a queue held back because Redis failed for it while answering a PING.
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
	// maxRefusedBackoff is the longest backoff of a queue Redis refuses (too many queues, not
	// created). An operator's action ends a refusal, so its rows are tried at least this often.
	maxRefusedBackoff = 30 * time.Second
	// maxHeldQueues bounds the queues a relay remembers holding back (their backoffs). A queue
	// past it is held back all the same, with the first backoff each time.
	maxHeldQueues = 10000
	// logNames bounds the queues and ids one log line names.
	logNames = 10
)

// The reasons a row is held back (tried again later) or set aside (left with its error). They
// appear in RelayBatch.HeldBackBy and SetAsideBy, and in the relay's logs. They label the
// conveyor_relay_held_back_total and conveyor_relay_set_aside_total series. They are a fixed
// set, so the series stay few whatever the queues are called.
const (
	// ReasonTooManyQueues: the row's queue is new and the known queues are at the maximum
	// (pipeline.ErrTooManyQueues). Held back.
	ReasonTooManyQueues = "too_many_queues"
	// ReasonQueueNotFound: the relay's Client publishes only to existing queues
	// (ClientConfig.RequireQueues) and the row's does not exist (pipeline.ErrQueueNotFound).
	// Held back.
	ReasonQueueNotFound = "queue_not_found"
	// ReasonRedis: Redis failed for the row's queue (a cluster node down, out of memory, a
	// timeout) while it answered a PING. Held back. (Redis not answering at all holds back no
	// queue: the whole relay backs off, as for PostgreSQL.)
	ReasonRedis = "redis"
	// ReasonQueueFull: the row's queue holds its bound of waiting jobs (max_waiting, policy
	// reject: pipeline.ErrQueueFull). Held back; the batch's rows the queue took are sent.
	ReasonQueueFull = "queue_full"
	// ReasonConflict: the row's id names a job with another type or payload
	// (pipeline.ErrConflict). Set aside.
	ReasonConflict = "conflict"
	// ReasonInvalid: the row's queue, type, spec or options are invalid (pipeline.ErrInvalid).
	// Set aside.
	ReasonInvalid = "invalid"
	// ReasonTooLarge: the row's payload is over the Client's limit (pipeline.ErrPayloadTooLarge).
	// Set aside.
	ReasonTooLarge = "too_large"
)

// HeldBackReasons and SetAsideReasons list the reasons of each kind.
var (
	HeldBackReasons = []string{ReasonTooManyQueues, ReasonQueueNotFound, ReasonRedis, ReasonQueueFull}
	SetAsideReasons = []string{ReasonConflict, ReasonInvalid, ReasonTooLarge}
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
	// Relayed counts rows sent and deleted. Duplicates counts those of them whose job existed
	// already. SetAside counts the rows Redis refused for good, left with their error. HeldBack
	// counts the rows put back for a later try: their queue refused or failed (see the package
	// doc).
	Relayed, Duplicates, SetAside, HeldBack int
	// HeldBackBy and SetAsideBy count the HeldBack and SetAside rows by reason (Reason*).
	HeldBackBy, SetAsideBy map[string]int
	// Lags are the relayed rows' commit-to-queued times. Each is the row's age when the batch
	// locked it, plus the batch's own time from its start to its commit. The age is by
	// PostgreSQL's clock, from its insert, which its commit follows closely.
	Lags []time.Duration
	// Err is the batch's error (PostgreSQL failed, or Redis did not answer): its rows, or
	// those it had not sent, stay as they were for a later batch.
	Err error
}

// Relay moves committed outbox rows into their queues. Several relays may run over one
// table (see the package doc). Run it, then Close it.
type Relay struct {
	cfg RelayConfig
	pg  *pgx.ConnConfig
	db  *sql.DB
	log zerolog.Logger

	relayed, duplicates, failed, heldBack atomic.Int64
	// reached says PostgreSQL answered once (Migrate, or a batch's select); held is the queues
	// held back, by name (at most maxHeldQueues). Both are Run's goroutine's only.
	reached bool
	held    map[string]*hold
}

// hold is a queue the relay holds back: its rows wait until until, and a failure after it
// doubles backoff.
type hold struct {
	until   time.Time
	backoff time.Duration
	reason  string
	err     string
}

// RelayStats counts what a Relay did since it was made.
type RelayStats struct {
	// Relayed counts rows sent and deleted. Duplicates counts those whose job existed already,
	// such as a row sent again after a relay died with it. Failed counts the rows set aside with
	// an error. HeldBack counts the times rows were put back for a later try (see the package
	// doc).
	Relayed, Duplicates, Failed, HeldBack int64
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
	return &Relay{cfg: cfg, pg: pg, db: stdlib.OpenDB(*pg.Copy()), log: cfg.Logger.With().Str("component", "relay").Logger(),
		held: make(map[string]*hold)}, nil
}

// Close closes the relay's connections. Call it after Run returned.
func (r *Relay) Close() error { return r.db.Close() }

// Stats returns the relay's counts.
func (r *Relay) Stats() RelayStats {
	return RelayStats{Relayed: r.relayed.Load(), Duplicates: r.duplicates.Load(), Failed: r.failed.Load(),
		HeldBack: r.heldBack.Load()}
}

// Pending counts the rows waiting to be sent (not set aside with an error; held back ones
// included), committed ones only.
func (r *Relay) Pending(ctx context.Context) (int, error) {
	var n int
	err := r.db.QueryRowContext(ctx, `SELECT count(*) FROM `+Table+` WHERE error IS NULL`).Scan(&n)
	return n, err
}

// Run relays rows until ctx ends, then finishes the batch in flight and returns nil. It returns
// an error only when PostgreSQL refuses to create the table (Migrate) at its start, such as for
// a missing permission or a wrong database. Other errors are logged and retried with a backoff.
// That includes PostgreSQL or Redis unreachable, at the start as later. So a relay started
// before its database (a container's start order) waits for it.
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
		// The rows this relay held back are due again when their queue's backoff ends: it
		// looks then, rather than a poll later.
		wait := r.cfg.PollInterval
		for _, h := range r.held {
			if d := time.Until(h.until); d > 0 {
				wait = min(wait, d)
			}
		}
		poll.Reset(wait)
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

// refusal is why a row is set aside.
type refusal struct{ reason, msg string }

// heldRows are the rows of one queue a batch holds back.
type heldRows struct {
	queue string
	ids   []string
	h     *hold
	fresh bool          // the queue was not held back before: said at warn level, later tries at debug
	wait  time.Duration // its rows' retry_at, from the UPDATE's clock
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// batch locks up to BatchSize rows that are due (not held back), sends them and deletes them in
// one PostgreSQL transaction. It returns how many rows it locked. A row Redis refuses for good
// is set aside, with its error column.
//
// A queue Redis refuses, or fails for while it answers, is held back. Causes are too many
// queues, a queue not created under RequireQueues, a cluster node down. Its rows get a retry_at
// after the queue's backoff, and the batches until then select the rows behind them. Redis not
// answering at all stops the batch. The batch leaves its untried rows as they were and returns
// the error; Run then backs off. It is not interrupted by ctx: a batch begun is finished (within
// batchTimeout) or rolled back.
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
	now := time.Now()
	r.forget(now)
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
	failed := make(map[string]refusal)
	var holds []heldRows
	var back []string // queues held back before, sent to now
	var downErr error // Redis does not answer: the batch stops there
	pinged, up := false, false
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
				failed[rw.id] = refusal{setAsideReason(rw.bad), rw.bad.Error()}
				continue
			}
			tasks, sent = append(tasks, t), append(sent, rw)
		}
		if len(tasks) == 0 {
			continue
		}
		if h := r.held[q]; h != nil && now.Before(h.until) {
			// Held back by an earlier failure: these rows wait out the queue's backoff
			// without a try (a queue whose rows keep coming costs Redis one try per backoff).
			holds = append(holds, heldRows{queue: q, ids: ids(sent), h: h})
			continue
		}
		var left []*row // rows of q without a final answer
		var sendErr error
		jobs, err := r.cfg.Client.EnqueueBatch(bctx, q, tasks)
		switch {
		case refused(err):
			// Some task was refused for good: a conflict (EnqueueBatch wrote the others),
			// or a Client stricter than Validate (it wrote nothing). Which ones: send them
			// one by one (those written already come back as duplicates).
			for i, rw := range sent {
				_, err := r.cfg.Client.Enqueue(bctx, q, pipeline.Task{Type: rw.typ, Payload: rw.payload}, rw.spec.options(rw.id)...)
				if refused(err) {
					failed[rw.id] = refusal{setAsideReason(err), err.Error()}
					continue
				}
				if err != nil {
					left, sendErr = sent[i:], err
					break
				}
				// Not counted as a duplicate when it comes back as one: EnqueueBatch wrote it.
				done = append(done, rw.id)
			}
		case errors.Is(err, pipeline.ErrQueueFull) && len(jobs) == len(sent):
			// Admitted in part: the rows the queue took are done, the others wait out the
			// queue's backoff like any refused queue's.
			full := map[int]bool{}
			for _, f := range pipeline.QueueFullErrors(err) {
				full[f.Task] = true
			}
			for i, rw := range sent {
				switch {
				case full[i] || jobs[i] == nil:
					left = append(left, rw)
				default:
					if jobs[i].Duplicate {
						dups++
					}
					done = append(done, rw.id)
				}
			}
			sendErr = err
		case err != nil:
			left, sendErr = sent, err
		default:
			for i, j := range jobs {
				if j != nil && j.Duplicate {
					dups++
				}
				done = append(done, sent[i].id)
			}
		}
		if len(left) == 0 {
			if _, ok := r.held[q]; ok {
				delete(r.held, q)
				back = append(back, q)
			}
			continue
		}
		reason := heldReason(sendErr)
		if reason == ReasonRedis {
			// Redis away altogether, or only this queue's part of it? Holding back every
			// queue of an unreachable Redis would rewrite every row at each backoff: it is
			// the whole relay that waits then, its rows untouched.
			if !pinged {
				pinged, up = true, r.cfg.Client.Redis().Ping(bctx).Err() == nil
			}
			if !up {
				downErr = fmt.Errorf("enqueue to %s: %w", q, sendErr)
				break
			}
		}
		h, fresh := r.holdQueue(q, reason, fmt.Sprintf("enqueue to %s: %v", q, sendErr), now)
		holds = append(holds, heldRows{queue: q, ids: ids(left), h: h, fresh: fresh})
	}
	if len(done) > 0 {
		if _, err := tx.ExecContext(bctx, `DELETE FROM `+Table+` WHERE id = ANY($1)`, done); err != nil {
			return 0, fmt.Errorf("delete: %w", err)
		}
	}
	if len(failed) > 0 {
		var fids, msgs []string
		for id, f := range failed {
			fids, msgs = append(fids, id), append(msgs, f.msg)
		}
		if _, err := tx.ExecContext(bctx, `UPDATE `+Table+` t SET error = u.msg, last_error = u.msg,
failed_at = clock_timestamp(), attempts = t.attempts + 1
FROM unnest($1::text[], $2::text[]) AS u(id, msg) WHERE t.id = u.id`, fids, msgs); err != nil {
			return 0, fmt.Errorf("set aside: %w", err)
		}
	}
	if len(holds) > 0 {
		// One statement for every queue held back: a batch of 500 rows of 500 queues the cap
		// refuses is one UPDATE, not 500. The column retry_at is by PostgreSQL's clock, which
		// the selection compares it with.
		var hids, msgs []string
		var waits []int64
		for i := range holds {
			hr := &holds[i]
			hr.wait = max(time.Until(hr.h.until), time.Millisecond)
			wait := hr.wait.Milliseconds()
			for _, id := range hr.ids {
				hids, msgs, waits = append(hids, id), append(msgs, hr.h.err), append(waits, wait)
			}
		}
		if _, err := tx.ExecContext(bctx, `UPDATE `+Table+` t SET retry_at = clock_timestamp() + u.ms * interval '1 millisecond',
last_error = u.msg, failed_at = clock_timestamp(), attempts = t.attempts + 1
FROM unnest($1::text[], $2::float8[], $3::text[]) AS u(id, ms, msg) WHERE t.id = u.id`, hids, waits, msgs); err != nil {
			return 0, fmt.Errorf("hold back: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	for _, hr := range holds {
		// Run wakes at until for the rows: not before their retry_at, which PostgreSQL's
		// clock set a little after the wait was taken, before this commit.
		hr.h.until = later(hr.h.until, time.Now().Add(hr.wait))
	}
	heldBack := 0
	for _, hr := range holds {
		heldBack += len(hr.ids)
	}
	r.logBatch(failed, holds, back)
	if report != nil {
		took := time.Since(start)
		report.Relayed, report.Duplicates, report.SetAside, report.HeldBack = len(done), dups, len(failed), heldBack
		if len(failed) > 0 {
			report.SetAsideBy = make(map[string]int)
			for _, f := range failed {
				report.SetAsideBy[f.reason]++
			}
		}
		if len(holds) > 0 {
			report.HeldBackBy = make(map[string]int)
			for _, hr := range holds {
				report.HeldBackBy[hr.h.reason] += len(hr.ids)
			}
		}
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
	r.heldBack.Add(int64(heldBack))
	if len(done) > 0 {
		r.log.Debug().Int("jobs", len(done)).Int("duplicates", dups).Dur("lock", locked).Dur("took", time.Since(start)).Msg("relayed")
	}
	return len(rows), downErr
}

// ids returns the rows' ids.
func ids(rows []*row) []string {
	out := make([]string, len(rows))
	for i, rw := range rows {
		out[i] = rw.id
	}
	return out
}

// holdQueue holds queue back after a failed try. Its backoff doubles from minBackoff, up to
// maxBackoff for Redis's failures. Refusals go up to maxRefusedBackoff, since an operator ends
// them. fresh says the queue was not held back already.
func (r *Relay) holdQueue(queue, reason, msg string, now time.Time) (h *hold, fresh bool) {
	limit := maxBackoff
	if reason != ReasonRedis {
		limit = maxRefusedBackoff
	}
	h, ok := r.held[queue]
	if !ok {
		h = &hold{}
		if len(r.held) < maxHeldQueues {
			r.held[queue] = h
		}
	}
	h.backoff = min(max(2*h.backoff, minBackoff), limit)
	h.until, h.reason, h.err = now.Add(h.backoff), reason, msg
	return h, !ok
}

// forget drops the queues whose backoff ended long ago. Their rows went: another relay sent
// them, or an operator deleted them. Or a failure now starts from the first backoff again.
func (r *Relay) forget(now time.Time) {
	for q, h := range r.held {
		if now.Sub(h.until) > 2*maxRefusedBackoff {
			delete(r.held, q)
		}
	}
}

// logBatch says which rows a batch set aside or held back and why, and which queues it sent to
// again. Held-back rows are said once per batch and reason, up to logNames queues and ids. That
// is at warn level when a queue is newly held back, at debug level for the tries after.
func (r *Relay) logBatch(failed map[string]refusal, holds []heldRows, back []string) {
	for id, f := range failed {
		r.log.Error().Str("job_id", id).Str("reason", f.reason).Str("error", f.msg).Msg("outbox row set aside")
	}
	type key struct {
		reason string
		fresh  bool
	}
	var order []key
	groups := make(map[key][]heldRows)
	for _, hr := range holds {
		k := key{hr.h.reason, hr.fresh}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], hr)
	}
	for _, k := range order {
		g := groups[k]
		var queues, someIDs []string
		rows := 0
		retry := time.Duration(0)
		for _, hr := range g {
			if len(queues) < logNames {
				queues = append(queues, hr.queue)
			}
			for _, id := range hr.ids {
				if len(someIDs) < logNames {
					someIDs = append(someIDs, id)
				}
			}
			rows += len(hr.ids)
			retry = max(retry, time.Until(hr.h.until))
		}
		ev := r.log.Debug()
		if k.fresh {
			ev = r.log.Warn()
		}
		ev.Str("reason", k.reason).Strs("queues", queues).Int("queue_count", len(g)).Int("rows", rows).
			Strs("job_ids", someIDs).Str("error", g[0].h.err).Dur("retry_in", retry.Round(time.Millisecond)).
			Msg("outbox rows held back; the rows of other queues go on")
	}
	if len(back) > 0 {
		r.log.Info().Strs("queues", back[:min(len(back), logNames)]).Int("queue_count", len(back)).
			Msg("outbox queues held back before took their rows")
	}
}

// refused reports whether err is Redis's or the Client's final answer for a job, which
// sending it again would not change.
func refused(err error) bool {
	return errors.Is(err, pipeline.ErrConflict) || errors.Is(err, pipeline.ErrInvalid) || errors.Is(err, pipeline.ErrPayloadTooLarge)
}

// setAsideReason is the Reason* of a refusal for good.
func setAsideReason(err error) string {
	switch {
	case errors.Is(err, pipeline.ErrConflict):
		return ReasonConflict
	case errors.Is(err, pipeline.ErrPayloadTooLarge):
		return ReasonTooLarge
	}
	return ReasonInvalid
}

// heldReason is the Reason* of a send's error that is not a refusal for good.
func heldReason(err error) string {
	switch {
	case errors.Is(err, pipeline.ErrTooManyQueues):
		return ReasonTooManyQueues
	case errors.Is(err, pipeline.ErrQueueNotFound):
		return ReasonQueueNotFound
	case errors.Is(err, pipeline.ErrQueueFull):
		return ReasonQueueFull
	}
	return ReasonRedis
}

// lock selects and locks the batch's rows, skipping those another relay holds. It takes the rows
// due (retry_at passed; never held back: -infinity), those never held back first, in insertion
// order. The index on (retry_at, seq) makes rows held back cost the selection nothing.
func (r *Relay) lock(ctx context.Context, tx *sql.Tx) ([]row, error) {
	res, err := tx.QueryContext(ctx, `SELECT id, queue, type, payload, spec,
EXTRACT(EPOCH FROM clock_timestamp() - created_at)::float8 FROM `+Table+`
WHERE error IS NULL AND retry_at <= now() ORDER BY retry_at, seq LIMIT $1 FOR UPDATE SKIP LOCKED`, r.cfg.BatchSize)
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

// migrate runs Migrate until it succeeds or ctx ends (nil: Run then stops). It also stops when
// PostgreSQL answers with an error of its own, which it returns, since trying again would not
// help. It waits the batches' backoff between tries while PostgreSQL cannot be reached.
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
