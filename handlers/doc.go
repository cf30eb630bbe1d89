// Package handlers holds ready-made job handlers for the `conveyor worker` command and the
// demo: small, pure functions of (ctx, job) that need no Redis and no configuration. Register
// them all on a worker with Register, or pick some from All.
//
// Every payload is JSON. A payload a handler cannot use (malformed JSON, a missing or
// out-of-range field) fails the job at once with a pipeline.SkipRetry error, since another
// attempt would read the same payload; the other errors below are retried with backoff until
// the job's retries are exhausted.
//
// # echo
//
// Any payload, returned unchanged as the result.
//
//	{"anything": ["at", "all"]}
//
// # sleep
//
// Sleeps ms milliseconds (0 to 86400000, that is at most 24 hours) and returns
// {"slept_ms":N}.
//
//	{"ms": 1500}
//
// A missing, negative or too large ms, or a payload that is not such an object, is a
// SkipRetry error. When the job's context ends first (its timeout, a lost lease, the worker
// shutting down) it returns at once with an error that wraps context.Canceled or
// context.DeadlineExceeded and the context's cause.
//
// # fail
//
// Always returns a retryable error: the payload's message, or "fail: this handler always
// fails" when the payload has none (any payload is accepted).
//
//	{"message": "boom"}
//
// # flaky
//
// Fails its first fail_times attempts with a retryable error ("flaky: attempt 2 of the first
// 3 fails"), then succeeds with {"attempt":N}, N being the attempt that succeeded. With
// fail_times 2 and at least 2 retries the job completes on its third attempt.
//
//	{"fail_times": 2}
//
// A missing or negative fail_times, or a payload that is not such an object, is a SkipRetry
// error.
//
// # http
//
// Makes one HTTP request and returns {"status":code,"body":"..."}, body being the first 64 KiB
// of the response body as a string (at most 1 MiB of it is read).
//
//	{"url": "https://example.com/hook", "method": "POST",
//	 "body": {"event": "signup"}, "headers": {"Authorization": "Bearer x"}}
//
// Fields:
//   - url (required): an absolute http or https URL with a host.
//   - method: defaults to GET without a body and to POST with one; it is upper-cased.
//   - body: a JSON string is sent as-is (no Content-Type is added); any other JSON value is
//     sent as its JSON encoding with Content-Type application/json. Absent or null means no
//     body.
//   - headers: request headers; they override the defaults (a Content-Type here wins, a Host
//     here sets the request's host).
//
// A missing url, another scheme, an invalid method or header, or a payload that is not such an
// object is a SkipRetry error. A 2xx answer is a success. A 4xx answer is a SkipRetry error,
// except 408 Request Timeout and 429 Too Many Requests, which are retried like any other
// non-2xx answer (5xx, a 3xx the client did not follow) and like transport errors (refused
// connections, timeouts). The request uses the job's context; the client of All and Register
// also has a DefaultHTTPTimeout timeout, and HTTP takes a client of your own.
//
// # noop
//
// Ignores its payload and returns no result and no error; it measures the queue's own
// overhead in benchmarks.
package handlers
