package cli

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/metrics"
	"github.com/conveyorq/conveyor/outbox"
)

func init() { addCommand(newRelayCmd) }

// envPostgres is --postgres's variable.
const envPostgres = "CONVEYOR_POSTGRES"

type relayFlags struct {
	postgres  string
	batch     int
	poll      time.Duration
	noMigrate bool
	// metricsAddr serves the relay's Prometheus series (metrics.Relay) there; empty: off.
	metricsAddr string
}

func newRelayCmd(a *app) *cobra.Command {
	var rf relayFlags
	cmd := &cobra.Command{
		Use:   "relay --postgres URL",
		Short: "Move jobs committed to a PostgreSQL outbox table into their queues, until SIGINT or SIGTERM",
		Long: `Relay jobs from PostgreSQL: applications write jobs into the table ` + outbox.Table + ` inside their
own transactions (Go: outbox.Enqueue), and the relay sends each committed row to its queue, then
deletes it. A rolled-back transaction leaves no row, so its job is never sent.

Each row is one job, whatever happens to the relay: the row's id is the job's id, a row is
deleted only after Redis took its job, and a row sent again (after a relay was killed between the
two) is absorbed by the queue. Several relays may run over one database: each row is locked by
one of them (FOR UPDATE SKIP LOCKED). The relay wakes on the table's notifications (LISTEN
` + outbox.Channel + `) and polls every --poll as well.

At start it creates the table, its index and its trigger when missing (--no-migrate: the schema
is managed elsewhere). Rows Redis refuses for good (an id already used by another job) stay in
the table with the reason in their error column. Rows whose queue Redis refuses for now (too
many queues, a queue not created) or fails for (a cluster node down) are held back with a
backoff per queue (retry_at, last_error), and the rows behind them go on. On SIGINT or SIGTERM
it finishes the batch in flight and exits 0.

--metrics-addr serves Prometheus metrics on GET /metrics: rows relayed, found sent already
or set aside (conveyor_relay_rows_total), rows held back and set aside by reason
(conveyor_relay_held_back_total, conveyor_relay_set_aside_total), the commit-to-queued lag
(conveyor_relay_lag_seconds), failed batches, and the rows waiting (conveyor_relay_pending,
counted at each scrape).`,
		Example: `  conveyor relay --postgres postgres://app@db:5432/shop
  CONVEYOR_POSTGRES=postgres://app@db/shop conveyor relay --redis redis://redis:6379/0 --batch 1000`,
		Args:        noArgs,
		Annotations: map[string]string{annotationEndsOnSignal: ""},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("postgres") {
				rf.postgres = a.getenv(envPostgres)
			}
			var errs []error
			if rf.postgres == "" {
				errs = append(errs, usageErrorf("--postgres (or $%s) is required: the database of the outbox table", envPostgres))
			}
			if rf.batch < 1 {
				errs = append(errs, usageErrorf("--batch must be at least 1, not %d", rf.batch))
			}
			if rf.poll <= 0 {
				errs = append(errs, usageErrorf("--poll must be positive, not %s", rf.poll))
			}
			if err := checkMetricsAddr(rf.metricsAddr); err != nil {
				errs = append(errs, err)
			}
			if err := errors.Join(errs...); err != nil {
				return err
			}
			client, err := a.client()
			if err != nil {
				return err
			}
			cfg := outbox.RelayConfig{Postgres: rf.postgres, Client: client, BatchSize: rf.batch,
				PollInterval: rf.poll, NoMigrate: rf.noMigrate, Logger: a.log}
			var m *metrics.Relay
			if rf.metricsAddr != "" {
				cfg.OnBatch = func(b outbox.RelayBatch) {
					m.Batch(b.Relayed, b.Duplicates, b.SetAside, b.Lags, b.Err != nil)
					m.Refused(b.HeldBackBy, b.SetAsideBy)
				}
			}
			r, err := outbox.NewRelay(cfg)
			if err != nil {
				return usageErrorf("%v", err)
			}
			defer func() { _ = r.Close() }()
			if rf.metricsAddr != "" {
				reg := prometheus.NewRegistry()
				if err := reg.Register(collectors.NewGoCollector()); err != nil {
					return err
				}
				if m, err = metrics.NewRelay(reg, r.Pending); err != nil {
					return err
				}
				m.Refused(zeroes(outbox.HeldBackReasons), zeroes(outbox.SetAsideReasons))
				stop, err := a.serveMetrics(rf.metricsAddr, reg)
				if err != nil {
					return err
				}
				defer stop()
			}
			a.log.Info().Str("postgres", redactURL(rf.postgres)).Str("redis", redactURL(a.redisURL)).
				Msg("starting relay; SIGINT or SIGTERM stops it")
			return r.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&rf.postgres, "postgres", "", "PostgreSQL URL of the database holding the outbox table; env $"+envPostgres)
	f.IntVar(&rf.batch, "batch", outbox.DefaultBatchSize, "most rows one batch locks, sends and deletes")
	f.DurationVar(&rf.poll, "poll", outbox.DefaultPollInterval, "look for rows this often when no notification came")
	f.BoolVar(&rf.noMigrate, "no-migrate", false, "do not create the table, index and trigger at start")
	f.StringVar(&rf.metricsAddr, "metrics-addr", "", "serve the relay's Prometheus metrics on GET /metrics at this host:port (default off)")
	return cmd
}

// zeroes maps each reason to 0: the series of each reason are shown from the start.
func zeroes(reasons []string) map[string]int {
	m := make(map[string]int, len(reasons))
	for _, r := range reasons {
		m[r] = 0
	}
	return m
}
