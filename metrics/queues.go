package metrics

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// Defaults of QueueCollectorConfig.
const (
	// DefaultMaxAge is how long a QueueCollector serves a reading. It is below Prometheus's
	// usual scrape intervals (15s to 1m), so each scrape sees fresh numbers. It is long enough
	// that several Prometheus servers, or a tight scrape interval, do not multiply the reads.
	DefaultMaxAge = 5 * time.Second
	// DefaultRefreshTimeout bounds one refresh.
	DefaultRefreshTimeout = 5 * time.Second
)

// QueueCollectorConfig configures a QueueCollector. Zero fields take the defaults; a negative
// duration is an error wrapping pipeline.ErrInvalid.
type QueueCollectorConfig struct {
	// Queues limits the series to these queues. Empty: every known queue.
	Queues []string
	// MaxAge is how long a reading is served before a scrape refreshes it. Defaults to
	// DefaultMaxAge.
	MaxAge time.Duration
	// Timeout bounds a refresh; a scrape that finds Redis slow or away serves the last
	// reading. Defaults to DefaultRefreshTimeout.
	Timeout time.Duration
	// Now is the clock of the cache; tests may replace it. Defaults to time.Now.
	Now func() time.Time
}

// QueueCollector is a prometheus.Collector of the queues' gauges and counters, and of their
// configured flow-control limits. It reads them through an Inspector. Inspector.Queues costs one
// round trip for the queue list and up to two per 100 queues (the gauges and counters, then the
// latencies of those with queued jobs); Inspector.LimitsOf one more for the limits.
//
// It caches a reading for MaxAge. However many queues there are and however often it is scraped,
// it refreshes at most once per MaxAge. Concurrent scrapes share one refresh. When a refresh
// fails, the last reading is served, and conveyor_queue_stats_errors_total counts the failure.
// (conveyor_queue_stats_age_seconds says how old the reading is.) With no reading yet, the
// scrape reports the error.
type QueueCollector struct {
	insp *pipeline.Inspector
	cfg  QueueCollectorConfig
	only map[string]bool // cfg.Queues, nil for all

	mu     sync.Mutex
	stats  []*pipeline.QueueStats
	limits map[string][]pipeline.Limit // the queues' limits, read with stats
	read   time.Time                   // when stats were read; zero before the first reading
	tried  time.Time                   // the last refresh, successful or not
	lastEr error
	errors float64
}

var (
	descJobs   = prometheus.NewDesc(Namespace+"_queue_jobs", jobsHelp(), []string{"queue", "state"}, nil)
	descPaused = prometheus.NewDesc(Namespace+"_queue_paused",
		"1 while the queue is paused (conveyor pause): workers do not take its jobs; 0 otherwise.",
		[]string{"queue"}, nil)
	descGroupWaiting = prometheus.NewDesc(Namespace+"_queue_group_waiting",
		"Jobs queued but waiting for a place in their fair group's window (WithGroup), not yet in the stream; they count in conveyor_queue_jobs{state=\"queued\"} too.",
		[]string{"queue"}, nil)
	descWaiting = prometheus.NewDesc(Namespace+"_queue_jobs_waiting", waitingHelp(), []string{"queue", "reason"}, nil)
	descLatency = prometheus.NewDesc(Namespace+"_queue_latency_seconds",
		"Age of the queue's oldest job ready to run (queued, not yet handed to a worker), by Redis's clock, as of the reading; 0 when none waits. It grows when the workers fall behind, stop, or the queue is paused.",
		[]string{"queue"}, nil)
	descAge = prometheus.NewDesc(Namespace+"_queue_stats_age_seconds",
		"Age of the queue reading served (it is cached, and served while a refresh fails).", nil, nil)
	descErrors = prometheus.NewDesc(Namespace+"_queue_stats_errors_total",
		"Refreshes of the queue reading that failed.", nil, nil)
	descLimitRate = prometheus.NewDesc(Namespace+"_queue_limit_rate",
		"A configured rate limit of the queue (pipeline.Limit), in jobs started per second, by scope: type (empty for every type) and per_key (each limit key separately).",
		[]string{"queue", "type", "per_key"}, nil)
	descLimitConcurrency = prometheus.NewDesc(Namespace+"_queue_limit_concurrency",
		"A configured concurrency limit of the queue (pipeline.Limit), in jobs running at once, by scope: type (empty for every type) and per_key (each limit key separately).",
		[]string{"queue", "type", "per_key"}, nil)
	// queueCounters are the queues' counters exported, with what they count.
	queueCounters = []struct {
		desc *prometheus.Desc
		val  func(*pipeline.QueueStats) int64
	}{
		{counterDesc("enqueued", "Jobs published to the queue."), func(s *pipeline.QueueStats) int64 { return s.Enqueued }},
		{counterDesc("completed", "Jobs of the queue that completed."), func(s *pipeline.QueueStats) int64 { return s.Completed }},
		{counterDesc("failed", "Jobs of the queue that went to the dead set."), func(s *pipeline.QueueStats) int64 { return s.Failed }},
		{counterDesc("retried", "Failed attempts scheduled to run again."), func(s *pipeline.QueueStats) int64 { return s.Retried }},
		{counterDesc("recovered", "Jobs put back after their worker died."), func(s *pipeline.QueueStats) int64 { return s.Recovered }},
		{counterDesc("canceled", "Jobs canceled."), func(s *pipeline.QueueStats) int64 { return s.Canceled }},
		{counterDesc("debounced", "Publishes that joined a pending debounced job instead of creating one."), func(s *pipeline.QueueStats) int64 { return s.Debounced }},
		{counterDesc("rejected_full", "Jobs the queue refused at its bound of waiting jobs (max_waiting, policy reject)."), func(s *pipeline.QueueStats) int64 { return s.RejectedFull }},
		{counterDesc("dropped_full", "Waiting jobs the queue canceled at its bound to admit new ones (max_waiting, policy drop-oldest)."), func(s *pipeline.QueueStats) int64 { return s.DroppedFull }},
	}
)

// jobsHelp is conveyor_queue_jobs's help: its state labels, one for each gauged status.
func jobsHelp() string {
	var states []string
	for _, in := range status.Infos() {
		if in.Gauge {
			states = append(states, in.Status.Word()+" ("+in.Help+")")
		}
	}
	return "Jobs in the queue now, by state: " + strings.Join(states, ", ") + "."
}

// waitingHelp is conveyor_queue_jobs_waiting's help: its reason labels, with what each waits
// for.
func waitingHelp() string {
	var rs []string
	for _, r := range status.Reasons() {
		rs = append(rs, string(r)+" ("+r.Help()+")")
	}
	return "Jobs of the queue that are not running, by why they wait (pipeline.QueueStats.WaitingFor: the gauges split without reading a job, so a scheduled job counts as due and a queued one never as no_worker_type; conveyor status ID says a job's own): " +
		strings.Join(rs, ", ") + "."
}

func counterDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(Namespace+"_queue_"+name+"_total", help+" Kept in Redis since the queue was created.",
		[]string{"queue"}, nil)
}

// NewQueueCollector returns a collector over insp; register it on a registry.
func NewQueueCollector(insp *pipeline.Inspector, cfg QueueCollectorConfig) (*QueueCollector, error) {
	if insp == nil {
		return nil, fmt.Errorf("%w: metrics: NewQueueCollector with a nil Inspector", pipeline.ErrInvalid)
	}
	if cfg.MaxAge < 0 || cfg.Timeout < 0 {
		return nil, fmt.Errorf("%w: metrics: negative MaxAge (%s) or Timeout (%s)", pipeline.ErrInvalid, cfg.MaxAge, cfg.Timeout)
	}
	cfg.MaxAge = cmp.Or(cfg.MaxAge, DefaultMaxAge)
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultRefreshTimeout)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &QueueCollector{insp: insp, cfg: cfg}
	if len(cfg.Queues) > 0 {
		c.only = make(map[string]bool, len(cfg.Queues))
		for _, q := range cfg.Queues {
			c.only[q] = true
		}
	}
	return c, nil
}

// Describe sends the descriptions of every series the collector makes.
func (c *QueueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descJobs
	ch <- descPaused
	ch <- descGroupWaiting
	ch <- descWaiting
	ch <- descLatency
	ch <- descAge
	ch <- descErrors
	ch <- descLimitRate
	ch <- descLimitConcurrency
	for _, qc := range queueCounters {
		ch <- qc.desc
	}
}

// Collect sends the series of the current reading, refreshing it first if it is older than
// MaxAge.
func (c *QueueCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	c.refresh()
	stats, limits, read, errs, lastErr := c.stats, c.limits, c.read, c.errors, c.lastEr
	now := c.cfg.Now()
	c.mu.Unlock()

	ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, errs)
	if read.IsZero() {
		ch <- prometheus.NewInvalidMetric(descJobs, fmt.Errorf("read the queues: %w", lastErr))
		return
	}
	ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, now.Sub(read).Seconds())
	for _, s := range stats {
		for _, st := range status.All() {
			if n, ok := s.Gauge(st); ok {
				ch <- prometheus.MustNewConstMetric(descJobs, prometheus.GaugeValue, float64(n), s.Queue, st.Word())
			}
		}
		for _, qc := range queueCounters {
			ch <- prometheus.MustNewConstMetric(qc.desc, prometheus.CounterValue, float64(qc.val(s)), s.Queue)
		}
		paused := 0.0
		if s.Paused {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(descPaused, prometheus.GaugeValue, paused, s.Queue)
		ch <- prometheus.MustNewConstMetric(descGroupWaiting, prometheus.GaugeValue, float64(s.GroupWaiting), s.Queue)
		// Every reason, 0 when none waits for it: a series that vanished would read as unknown.
		for _, r := range status.Reasons() {
			ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(s.WaitingFor[r]), s.Queue, string(r))
		}
		ch <- prometheus.MustNewConstMetric(descLatency, prometheus.GaugeValue, float64(s.LatencyMS)/1000, s.Queue)
		for _, l := range limits[s.Queue] {
			perKey := strconv.FormatBool(l.PerKey)
			if l.Rate > 0 {
				ch <- prometheus.MustNewConstMetric(descLimitRate, prometheus.GaugeValue,
					float64(l.Rate)/l.Interval.Seconds(), s.Queue, l.Type, perKey)
			}
			if l.Concurrency > 0 {
				ch <- prometheus.MustNewConstMetric(descLimitConcurrency, prometheus.GaugeValue,
					float64(l.Concurrency), s.Queue, l.Type, perKey)
			}
		}
	}
}

// refresh reads the queues again if the reading is older than MaxAge. A failed try is not
// repeated within MaxAge either, so a Redis that is away is not asked at every scrape. The
// caller holds c.mu: concurrent scrapes wait for one refresh and share it.
func (c *QueueCollector) refresh() {
	now := c.cfg.Now()
	if !c.tried.IsZero() && now.Sub(c.tried) < c.cfg.MaxAge {
		return
	}
	c.tried = now
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	stats, err := c.insp.Queues(ctx)
	if err != nil {
		c.errors++
		c.lastEr = err
		return
	}
	if c.only != nil {
		stats = slices.DeleteFunc(stats, func(s *pipeline.QueueStats) bool { return !c.only[s.Queue] })
	}
	// The limits of the known queues read, in one more round trip (one per node on a cluster). A
	// listed queue that is not known has none, since limits are set on existing queues only. Its
	// name, which nothing checked, is not sent.
	names := make([]string, len(stats))
	for k, s := range stats {
		names[k] = s.Queue
	}
	limits, err := c.insp.LimitsOf(ctx, names)
	if err != nil {
		c.errors++
		c.lastEr = err
		return
	}
	if c.only != nil {
		// A listed queue nothing was enqueued to yet is not known: it is all zeros.
		for q := range c.only {
			if !slices.ContainsFunc(stats, func(s *pipeline.QueueStats) bool { return s.Queue == q }) {
				stats = append(stats, &pipeline.QueueStats{Queue: q})
			}
		}
		slices.SortFunc(stats, func(a, b *pipeline.QueueStats) int { return cmp.Compare(a.Queue, b.Queue) })
	}
	c.stats, c.limits, c.read, c.lastEr = stats, limits, now, nil
}
