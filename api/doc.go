// Package api is Conveyor's HTTP API: an http.Handler to mount in a server of your own (or run
// with `conveyor serve`) that publishes jobs, answers their state with long polling, lists and
// administers queues and dead jobs, and serves /healthz, /readyz, /metrics and the dashboard.
// It is built only on pipeline.Client and pipeline.Inspector; docs/API.md is the reference of
// every route with curl examples, and GET /v1/openapi.json the machine-readable one.
//
//	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
//	...
//	inspector, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
//	...
//	srv, err := api.New(client, inspector, api.Config{AuthToken: token})
//	...
//	hs := &http.Server{Addr: addr, Handler: srv, WriteTimeout: api.DefaultMaxWait + 30*time.Second}
//	hs.RegisterOnShutdown(func() { srv.Close() })
//
// # Routes
//
// Jobs live under /v1/queues/{queue}/jobs: POST publishes one (202 with a Location header, or
// 200 when the id or Idempotency-Key named an existing job), POST .../jobs:batch up to
// MaxBatchJobs in one pipelined EnqueueBatch, GET .../jobs/{id} reads one, DELETE cancels it,
// GET .../jobs?status= lists a page. Dead jobs are replayed and purged under
// /v1/queues/{queue}/dead. GET /v1/jobs/{id} finds a job in every known queue. GET /v1/queues
// and GET /v1/queues/{queue} answer statistics as `conveyor stats --json` does, and
// GET /v1/throughput the rates of the dashboard's chart. A job is always Job.MarshalJSON's
// JSON: the CLI's `status --json` contract. Workflows and batches are published with POST
// /v1/queues/{queue}/workflows and .../batches (their bodies read by DecodeWorkflow and
// DecodeBatch, which the CLI shares; each task a job body) and read under .../workflows, as
// pipeline.WorkflowState's JSON.
//
// # Errors
//
// Every error is {"error":{"code":..,"message":..}} with a stable code (the Code constants) and
// the status it implies; 409s add a "reason". Redis errors and bugs are logged, never shown:
// the client reads "Redis is unreachable" (503) or "internal error" (500).
//
// # Authentication and the cross-site rule
//
// With Config.AuthToken set, every route but /healthz, /readyz, /v1/openapi.json (and its 3.0
// copy, /v1/openapi-3.0.json) and the dashboard's files needs "Authorization: Bearer <token>" (compared in constant time). The
// dashboard's page holds no data; its calls to /v1 carry the token.
//
// A mutating request (POST, DELETE) must carry Content-Type: application/json or the header
// X-Conveyor-Request: 1, and its Origin header, when it has one, must name the request's own
// host; otherwise it is refused with 403. A page of another site can send neither header
// without a CORS preflight, and the API answers no preflight, so a browser that holds a
// session to the API (a loopback server without a token, say) cannot be made to change jobs
// from elsewhere.
//
// Without a token, those routes answer only a request whose Host is a loopback name or address,
// or one of Config.AllowedHosts; any other gets 421 before anything is read or written. A page
// that points its own name at 127.0.0.1 (DNS rebinding) sends its own name as Host and Origin,
// which agree, so only the Host tells it from a local client.
//
// # Bounds
//
// A batch body is decoded one job at a time and refused at the first bad job or the 1,001st,
// so a body costs a small multiple of its largest job whatever it holds. A publish to a new
// queue adds it to the known queues up to the Client's maximum (pipeline.ClientConfig.MaxQueues;
// past it, 409 with reason too_many_queues), or not at all with ClientConfig.RequireQueues (404).
//
// # Long polling
//
// GET .../jobs/{id}?wait=30s answers as soon as the job is completed, failed or canceled, or
// when the wait (cut to Config.MaxWait) ends, with the job as it is. A request waits with
// pipeline.Client.Wait: it reads the job once, then learns of its end from the job events the
// scripts publish, over the Client's one subscription per queue, and reads it again when it
// ends. Waiting requests hold no Redis connection and cost no reads while they wait but a
// bounded fallback (a few reads a second for all of them, whatever their number), so any number
// of waiters costs Redis about nothing (docs/BENCHMARKS.md, "Job events and long polls"). Close
// wakes them all. With &until=progress a wait answers at the job's next change too (its
// status, attempt or progress report).
//
// # Job events stream
//
// GET .../jobs/{id}/events is a Server-Sent Events stream of the job's status changes and its
// handler's progress reports (pipeline.Job.Progress), ending after the final status; it follows
// the job with pipeline.Waiter.Follow over the same subscriptions as the long polls, sends a
// heartbeat comment after each quiet ?heartbeat= (DefaultHeartbeat), and moves the connection's
// write deadline on at every write, so that an http.Server's WriteTimeout does not cut it.
// Close ends every stream.
//
// # Throughput
//
// GET /v1/throughput reads the history the workers keep in Redis (pipeline.Inspector.History):
// per queue and for all queues, completed, dead and retried jobs with queue wait and execution
// time percentiles, in 5 s buckets kept an hour and 1 min buckets kept a day. The server keeps
// nothing of its own, so a restart loses nothing, and several servers answer alike.
package api
