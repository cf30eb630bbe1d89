// Package api is Conveyor's HTTP API: an http.Handler to mount in a server of your own, or to
// run with `conveyor serve`. It publishes jobs and answers their state with long polling. It
// lists and administers queues and dead jobs. It serves /healthz, /readyz, /metrics and the
// dashboard. It is built only on pipeline.Client and pipeline.Inspector. docs/API.md is the
// reference of every route, with curl examples; GET /v1/openapi.json is the machine-readable
// one.
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
// Jobs live under /v1/queues/{queue}/jobs. POST publishes one: 202 with a Location header, or
// 200 when the id or Idempotency-Key named an existing job. POST .../jobs:batch publishes up to
// MaxBatchJobs in one pipelined EnqueueBatch. GET .../jobs/{id} reads one, and DELETE cancels
// it. GET .../jobs?status= lists a page. Dead jobs are replayed and purged under
// /v1/queues/{queue}/dead. GET /v1/jobs/{id} finds a job in every known queue.
//
// GET /v1/queues and GET /v1/queues/{queue} answer statistics as `conveyor stats --json` does.
// GET /v1/throughput answers the rates of the dashboard's chart. A job is always
// Job.MarshalJSON's JSON: the CLI's `status --json` contract.
//
// Under encryption at rest (Config.Keys), GET /v1/keys lists the key ids and POST
// /v1/keys/rotate re-seals what Redis stores under the newest key, one bounded pass a call
// (pipeline.RotateOptions.Max and Cursor), the PayloadToken's only when one is set.
//
// Workflows and batches are published with POST /v1/queues/{queue}/workflows and .../batches.
// DecodeWorkflow and DecodeBatch read their bodies, and the CLI shares them; each task is a job
// body. They are read under .../workflows, as pipeline.WorkflowState's JSON.
//
// # Errors
//
// Every error is {"error":{"code":..,"message":..}}, with a stable code (the Code constants) and
// the status it implies. A 409 adds a "reason". Redis errors and bugs are logged, never shown.
// The client reads "Redis is unreachable" (503) or "internal error" (500).
//
// # Authentication and the cross-site rule
//
// With Config.AuthToken set, most routes need "Authorization: Bearer <token>", compared in
// constant time. The exceptions are /healthz, /readyz, /v1/openapi.json, its 3.0 copy
// /v1/openapi-3.0.json, and the dashboard's files. The dashboard's page holds no data; its calls
// to /v1 carry the token.
//
// A mutating request (POST, DELETE) must carry Content-Type: application/json or the header
// X-Conveyor-Request: 1. Its Origin header, when it has one, must name the request's own host.
// Otherwise it is refused with 403. A page of another site can send neither header without a
// CORS preflight, and the API answers no preflight. So a browser that holds a session to the API
// cannot be made to change jobs from elsewhere, say with a loopback server without a token.
//
// Without a token, those routes answer only a request whose Host is a loopback name or address,
// or one of Config.AllowedHosts. Any other gets 421 before anything is read or written. A page
// that points its own name at 127.0.0.1 (DNS rebinding) sends its own name as Host and Origin.
// Those agree, so only the Host tells it from a local client.
//
// # Bounds
//
// A batch body is decoded one job at a time. It is refused at the first bad job or the 1,001st.
// So a body costs a small multiple of its largest job, whatever it holds. A publish to a new
// queue adds it to the known queues, up to the Client's maximum
// (pipeline.ClientConfig.MaxQueues). Past it, the answer is 409 with reason too_many_queues.
// With ClientConfig.RequireQueues it adds none, and the answer is 404.
//
// # Long polling
//
// GET .../jobs/{id}?wait=30s answers as soon as the job is completed, failed or canceled. Or it
// answers when the wait (cut to Config.MaxWait) ends, with the job as it is. A request waits
// with pipeline.Client.Wait. It reads the job once, then learns of its end from the job events
// the scripts publish, over the Client's one subscription per queue. It reads the job again when
// it ends.
//
// Waiting requests hold no Redis connection. They cost no reads while they wait, but a bounded
// fallback: a few reads a second for all of them, whatever their number. So any number of
// waiters costs Redis about nothing (docs/BENCHMARKS.md, "Job events and long polls"). Close
// wakes them all. With &until=progress a wait answers at the job's next change too: its status,
// attempt or progress report.
//
// # Job events stream
//
// GET .../jobs/{id}/events is a Server-Sent Events stream. It carries the job's status changes
// and its handler's progress reports (pipeline.Job.Progress), and ends after the final status.
// It follows the job with pipeline.Waiter.Follow, over the same subscriptions as the long polls.
// It sends a heartbeat comment after each quiet ?heartbeat= (DefaultHeartbeat). It moves the
// connection's write deadline on at every write, so an http.Server's WriteTimeout does not cut
// it. Close ends every stream.
//
// # Throughput
//
// GET /v1/throughput reads the history the workers keep in Redis (pipeline.Inspector.History).
// It gives per queue and for all queues the completed, dead and retried jobs. It adds queue wait
// and execution time percentiles. Buckets are 5 s, kept an hour, and 1 min, kept a day. The
// server keeps nothing of its own. So a restart loses nothing, and several servers answer alike.
package api
