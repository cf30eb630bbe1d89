package api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// The load figures of the API: jobs per second accepted over loopback HTTP, against a private
// Redis, by concurrent clients (benchParallelism per core), one job per POST and 100 per batch
// POST; and the same Redis fed by pipeline.Client directly, for comparison. Run with
//
//	go test -run '^$' -bench 'API|Bare' -benchtime 20000x ./api/
//
// docs/API.md keeps the figures.

const (
	benchBatch       = 100
	benchParallelism = 8
)

// benchEnv is the benchmarks' own environment, apart from the tests' bundle (apiEnv): a Redis
// server of its own, no request log and a wide connection pool, so that the figures measure
// the API and Redis alone.
type benchEnv struct {
	url    string
	http   *http.Client
	client *pipeline.Client
	queue  string
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	srv := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = rdb.Close() })
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(b, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(b, err)
	s, err := api.New(client, insp, api.Config{})
	require.NoError(b, err)
	hs := httptest.NewServer(s)
	b.Cleanup(func() { hs.Close(); _ = s.Close() })
	tr := &http.Transport{MaxIdleConnsPerHost: 1024}
	b.Cleanup(tr.CloseIdleConnections)
	return &benchEnv{url: hs.URL, http: &http.Client{Transport: tr}, client: client, queue: "bench"}
}

func (e *benchEnv) post(b *testing.B, path string, body []byte, want int) {
	res, err := e.http.Post(e.url+path, "application/json", bytes.NewReader(body))
	if err != nil {
		b.Error(err)
		return
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	if res.StatusCode != want {
		b.Errorf("POST %s: %d", path, res.StatusCode)
	}
}

func reportJobs(b *testing.B, perOp int) {
	b.ReportMetric(float64(b.N*perOp)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkAPIPost: one job per POST /v1/queues/{queue}/jobs.
func BenchmarkAPIPost(b *testing.B) {
	e := newBenchEnv(b)
	body := []byte(`{"type":"echo","payload":{"n":1}}`)
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			e.post(b, "/v1/queues/"+e.queue+"/jobs", body, http.StatusAccepted)
		}
	})
	reportJobs(b, 1)
}

// BenchmarkAPIPostBatch: 100 jobs per POST /v1/queues/{queue}/jobs:batch.
func BenchmarkAPIPostBatch(b *testing.B) {
	e := newBenchEnv(b)
	body := []byte(`{"jobs":[` + strings.TrimSuffix(strings.Repeat(`{"type":"echo","payload":{"n":1}},`, benchBatch), ",") + `]}`)
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			e.post(b, "/v1/queues/"+e.queue+"/jobs:batch", body, http.StatusAccepted)
		}
	})
	reportJobs(b, benchBatch)
}

// BenchmarkBareEnqueue: pipeline.Client.Enqueue on the same kind of Redis, no HTTP.
func BenchmarkBareEnqueue(b *testing.B) {
	e := newBenchEnv(b)
	task := pipeline.Task{Type: "echo", Payload: []byte(`{"n":1}`)}
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := e.client.Enqueue(context.Background(), e.queue, task); err != nil {
				b.Error(err)
			}
		}
	})
	reportJobs(b, 1)
}

// BenchmarkBareEnqueueBatch: pipeline.Client.EnqueueBatch of 100, no HTTP.
func BenchmarkBareEnqueueBatch(b *testing.B) {
	e := newBenchEnv(b)
	tasks := make([]pipeline.Task, benchBatch)
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: "echo", Payload: []byte(`{"n":1}`)}
	}
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := e.client.EnqueueBatch(context.Background(), e.queue, tasks); err != nil {
				b.Error(fmt.Errorf("enqueue batch: %w", err))
			}
		}
	})
	reportJobs(b, benchBatch)
}
