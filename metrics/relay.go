package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Relay holds the series of an outbox relay (conveyor relay --metrics-addr). They count rows
// relayed, found already sent, or set aside; the commit-to-queued lag; failed batches; and the
// rows waiting, read at each scrape. Feed it from outbox.RelayConfig.OnBatch with Batch.
type Relay struct {
	rows     *prometheus.CounterVec
	lag      prometheus.Histogram
	failing  prometheus.Counter
	heldBack *prometheus.CounterVec
	setAside *prometheus.CounterVec
}

// The result labels of conveyor_relay_rows_total.
const (
	RelayRelayed   = "relayed"
	RelayDuplicate = "duplicate" // relayed, and its job existed already: a row sent again
	RelaySetAside  = "set_aside" // refused for good, left in the table with its error
)

// relayPendingTimeout bounds the scrape's count of waiting rows.
const relayPendingTimeout = 5 * time.Second

// NewRelay registers a relay's series on reg. When pending is not nil, it counts the rows
// waiting (outbox.Relay.Pending). The series conveyor_relay_pending reads it at each scrape. It
// is absent from a scrape whose count failed.
func NewRelay(reg prometheus.Registerer, pending func(context.Context) (int, error)) (*Relay, error) {
	m := &Relay{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "relay_rows_total",
			Help: "Outbox rows the relay handled, by result: relayed (sent and deleted), duplicate (relayed, its job existed already), set_aside (refused for good, kept with its error)."},
			[]string{"result"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "relay_lag_seconds",
			Help: "Per relayed row, from its insert (PostgreSQL's clock) to the commit of the batch that queued its job.", Buckets: LatencyBuckets}),
		failing: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "relay_batch_errors_total",
			Help: "Relay batches that failed (PostgreSQL or Redis unreachable): their rows stay for a later batch."}),
		// By reason only, not by queue. The queues of rows held back for too many queues are, by
		// nature, ones Redis does not know, named by whoever wrote the rows. The log and the
		// table name them.
		heldBack: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "relay_held_back_total",
			Help: "Outbox rows the relay put back for a later try, by reason: their queue was refused (too_many_queues, queue_not_found) or Redis failed for it (redis); the rows behind them go on."},
			[]string{"reason"}),
		setAside: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "relay_set_aside_total",
			Help: "Outbox rows Redis refused for good, left in the table with their error, by reason (conflict, invalid, too_large)."},
			[]string{"reason"}),
	}
	cs := []prometheus.Collector{m.rows, m.lag, m.failing, m.heldBack, m.setAside}
	if pending != nil {
		cs = append(cs, &pendingCollector{count: pending, desc: prometheus.NewDesc(Namespace+"_relay_pending",
			"Outbox rows committed and waiting for the relay (not set aside).", nil, nil)})
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range []string{RelayRelayed, RelayDuplicate, RelaySetAside} {
		m.rows.WithLabelValues(r) // present at 0 from the start, so rate() sees the first rows
	}
	return m, nil
}

// Batch records one batch: its counts, its relayed rows' lags, and whether it failed.
func (m *Relay) Batch(relayed, duplicates, setAside int, lags []time.Duration, failed bool) {
	m.rows.WithLabelValues(RelayRelayed).Add(float64(relayed))
	m.rows.WithLabelValues(RelayDuplicate).Add(float64(duplicates))
	m.rows.WithLabelValues(RelaySetAside).Add(float64(setAside))
	for _, l := range lags {
		m.lag.Observe(l.Seconds())
	}
	if failed {
		m.failing.Inc()
	}
}

// Refused records a batch's rows held back and set aside, counted by reason (outbox.Reason*:
// a fixed set). A reason given with 0 is shown at 0, so that rate() sees its first rows.
func (m *Relay) Refused(heldBack, setAside map[string]int) {
	for r, n := range heldBack {
		m.heldBack.WithLabelValues(r).Add(float64(n))
	}
	for r, n := range setAside {
		m.setAside.WithLabelValues(r).Add(float64(n))
	}
}

// pendingCollector reads the waiting rows at each scrape.
type pendingCollector struct {
	count func(context.Context) (int, error)
	desc  *prometheus.Desc
}

func (c *pendingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *pendingCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), relayPendingTimeout)
	defer cancel()
	n, err := c.count(ctx)
	if err != nil {
		return // absent: a scrape still serves the other series while PostgreSQL is away
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n))
}
