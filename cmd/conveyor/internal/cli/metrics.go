package cli

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/metrics"
	"github.com/conveyorq/conveyor/pipeline"
)

// metricsRegistry returns a registry of its own (nothing a library registered on the default
// one leaks in) with the Go runtime's and the process's series, and the queues' through insp:
// queues, or every known queue when nil.
func metricsRegistry(insp *pipeline.Inspector, queues []string) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	qc, err := metrics.NewQueueCollector(insp, metrics.QueueCollectorConfig{Queues: queues})
	if err != nil {
		return nil, err
	}
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), qc} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// checkMetricsAddr validates --metrics-addr: empty (off) or host:port.
func checkMetricsAddr(addr string) error {
	if addr == "" {
		return nil
	}
	_, err := checkHostPort("--metrics-addr", addr, ":9090 or 127.0.0.1:9090")
	return err
}

// checkHostPort validates the listen address of flag: host:port with a port from 0 to 65535
// (example shows a good one). It returns the host.
func checkHostPort(flag, addr, example string) (host string, err error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", usageErrorf("%s %q: want host:port, such as %s", flag, addr, example)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", usageErrorf("%s %q: port %q is not a number from 0 to 65535", flag, addr, port)
	}
	return host, nil
}

// Limits of the metrics server: a scrape is small and quick.
const (
	metricsReadHeaderTimeout = 10 * time.Second
	metricsWriteTimeout      = 30 * time.Second
	metricsIdleTimeout       = 2 * time.Minute
)

// serveMetrics serves reg's series on GET /metrics at addr, in the background; stop closes
// the server. It fails (exit 1) when it cannot listen.
func (a *app) serveMetrics(addr string, reg *prometheus.Registry) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w; is another server using the port?", addr, stripNetPrefix(err))
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	log := a.log.With().Str("component", "metrics").Logger()
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: metricsReadHeaderTimeout, WriteTimeout: metricsWriteTimeout,
		IdleTimeout: metricsIdleTimeout}
	go func() {
		if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("the metrics server stopped")
		}
	}()
	log.Info().Str("addr", ln.Addr().String()).Str("url", "http://"+ln.Addr().String()+"/metrics").
		Msg("serving Prometheus metrics")
	return func() { _ = hs.Close() }, nil
}

// workerMetrics, when addr is set, registers the worker's series and its queues' on a
// registry of their own, wires them into cfg (Hooks: the jobs, the scheduler and the
// recoverer) and rdb (the Redis errors) and serves them at addr. With no addr it does nothing.
func (a *app) workerMetrics(addr string, rdb redis.UniversalClient, cfg *pipeline.WorkerConfig) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: cfg.Prefix})
	if err != nil {
		return nil, err
	}
	reg, err := metricsRegistry(insp, cfg.Queues)
	if err != nil {
		return nil, err
	}
	m, err := metrics.NewWorker(reg)
	if err != nil {
		return nil, err
	}
	rdb.AddHook(m.RedisHook())
	cfg.Hooks = m.Hooks()
	return a.serveMetrics(addr, reg)
}
