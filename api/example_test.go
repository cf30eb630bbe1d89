package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/pipeline"
)

// Mount the API, publish a job over HTTP, let a worker run it, and long-poll it to the end. The
// example runs on an in-process Redis (miniredis); in production rdb is your Redis.
func Example() {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()

	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	if err != nil {
		panic(err)
	}
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		panic(err)
	}
	srv, err := api.New(client,
		insp, api.Config{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv) // or http.Server{Handler: srv, ...}
	defer hs.Close()

	worker, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{"emails"}})
	if err != nil {
		panic(err)
	}
	worker.Handle("welcome", func(context.Context, *pipeline.Job) ([]byte, error) {
		return []byte(`{"sent":true}`), nil
	})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- worker.Run(ctx) }()
	defer func() { stop(); <-done }()

	res, err := http.Post(hs.URL+"/v1/queues/emails/jobs", "application/json",
		strings.NewReader(`{"type":"welcome","payload":{"to":"ada@example.com"}}`))
	if err != nil {
		panic(err)
	}
	var job struct {
		ID     string          `json:"id"`
		Status string          `json:"status"`
		Result json.RawMessage `json:"result"`
	}
	_ = json.NewDecoder(res.Body).Decode(&job)
	res.Body.Close()
	fmt.Println(res.Status, job.Status)

	location := res.Header.Get("Location") // /v1/queues/emails/jobs/<id>
	for {
		res, err = http.Get(hs.URL + location + "?wait=10s")
		if err != nil {
			panic(err)
		}
		_ = json.NewDecoder(res.Body).Decode(&job)
		res.Body.Close()
		if job.Status == "completed" || job.Status == "failed" || job.Status == "canceled" {
			break
		}
	}
	fmt.Println(job.Status, string(job.Result))
	// Output:
	// 202 Accepted queued
	// completed {"sent":true}
}
