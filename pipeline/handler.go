package pipeline

import "context"

// HandlerFunc runs one attempt of a job. It returns the job's result (stored with the completed
// job, at most the worker's MaxResultBytes) or an error. A plain error retries the job with
// backoff until its retries are exhausted. An error wrapped with SkipRetry fails it at once.
// A panic counts as a failed attempt. The ctx is cancelled when the job's timeout passes, when
// its lease is lost (it was recovered or canceled elsewhere) and when the worker shuts down. A
// handler should return promptly then.
type HandlerFunc func(ctx context.Context, job *Job) ([]byte, error)
