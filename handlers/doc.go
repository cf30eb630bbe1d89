// Package handlers holds ready-made job handlers for the `conveyor worker` command and the demo.
// They are small, pure functions of (ctx, job) that need no Redis and no configuration. Register
// them all on a worker with Register, or pick some from All.
//
// Every payload is JSON. A payload a handler cannot use fails the job at once with a
// pipeline.SkipRetry error, since another attempt would read the same payload. Such a payload is
// malformed JSON, or has a missing or out-of-range field. The other errors below are retried
// with backoff until the job's retries run out.
//
// # echo
//
// Returns any payload unchanged as the result. Example: `{"anything": ["at", "all"]}`.
//
// # sleep
//
// Sleeps ms milliseconds and returns {"slept_ms":N}. Example: `{"ms": 1500}`. The ms are 0 to
// 86400000, that is at most 24 hours.
//
// A missing, negative or too large ms is a SkipRetry error, as is a payload that is not such an
// object. The job's context may end first: its timeout, a lost lease, the worker shutting down.
// Then it returns at once with an error that wraps context.Canceled or context.DeadlineExceeded,
// and the context's cause.
//
// # fail
//
// Always returns a retryable error. Its text is the payload's message, or "fail: this handler
// always fails" when the payload has none. Any payload is accepted. Example: `{"message":
// "boom"}`.
//
// # flaky
//
// Fails its first fail_times attempts with a retryable error ("flaky: attempt 2 of the first 3
// fails"). Then it succeeds with {"attempt":N}, N being the attempt that succeeded. With
// fail_times 2 and at least 2 retries, the job completes on its third attempt. Example:
// `{"fail_times": 2}`.
//
// A missing or negative fail_times, or a payload that is not such an object, is a SkipRetry
// error.
//
// # http
//
// Makes one HTTP request. An example payload:
//
//	{"url": "https://example.com/hook", "method": "POST",
//	 "body": {"event": "signup"}, "headers": {"Authorization": "Bearer x"}}
//
// It returns {"status":code,"body":"..."}. The body is the first 64 KiB of the response body as
// a string; at most 1 MiB of it is read.
//
// The url is required: an absolute http or https URL with a host. The method defaults to GET
// without a body and to POST with one; it is upper-cased. A body that is a JSON string is sent
// as-is, with no Content-Type added. Any other JSON value is sent as its JSON encoding, with
// Content-Type application/json. An absent or null body means none. The headers override the
// defaults: a Content-Type here wins, and a Host here sets the request's host.
//
// These are SkipRetry errors: a missing url, another scheme, an invalid method or header, or a
// payload that is not such an object. A 2xx answer is a success. A 4xx answer is a SkipRetry
// error, except 408 Request Timeout and 429 Too Many Requests. Those are retried, as are other
// non-2xx answers (5xx, a 3xx the client did not follow). Transport errors (refused connections,
// timeouts) are retried too. The request uses the job's context. The client of All and Register
// also has a DefaultHTTPTimeout timeout; HTTP takes a client of your own.
//
// # noop
//
// Ignores its payload and returns no result and no error. It measures the queue's own overhead
// in benchmarks.
package handlers
