package metrics_test

import (
	"context"
	"log"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/metrics"
	"github.com/conveyorq/conveyor/pipeline"
)

// A worker with its series and its queues' on a registry of its own, served on /metrics.
func ExampleNewWorker() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	reg := prometheus.NewRegistry()
	m, err := metrics.NewWorker(reg)
	if err != nil {
		log.Fatal(err)
	}
	rdb.AddHook(m.RedisHook())
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{"emails"}, Hooks: m.Hooks()})
	if err != nil {
		panic(err)
	}
	w.Handle("welcome", func(context.Context, *pipeline.Job) ([]byte, error) { return nil, nil })

	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	if err != nil {
		panic(err)
	}
	qc, err := metrics.NewQueueCollector(insp,
		metrics.QueueCollectorConfig{Queues: []string{"emails"}})
	if err != nil {
		log.Fatal(err)
	}
	reg.MustRegister(qc)
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	go func() { log.Fatal(http.ListenAndServe("127.0.0.1:9090", nil)) }()
	_ = w.Run(context.Background())
}
