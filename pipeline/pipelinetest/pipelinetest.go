// Package pipelinetest helps test code that uses Conveyor. It asserts that code under test
// enqueued a job (RequireEnqueued, RequireNotEnqueued). It runs a handler on a job built in
// the test, without Redis, and keeps what the handler logs (NewJob, Run, Result.Logs). It
// runs a real worker for the length of a test (StartWorker, Work).
//
// The assertions read a Redis that the test provides, through pipeline.Inspector, so they see
// what a worker would see. Give them the Inspector of the Redis (and key prefix) the code under
// test enqueues to. Each takes a testing.TB and fails the test with what it found instead.
// Code that encrypts at rest (pipeline.ClientConfig.Keys) needs an Inspector with the same
// keys (InspectorConfig.Keys), or Want.Payload is compared with the sealed bytes.
package pipelinetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// Want describes a job that RequireEnqueued looks for. Type is required; every other zero
// field matches any job.
type Want struct {
	Type string
	// ID is the job's id (pipeline.WithID); given, only that job is read.
	ID string
	// Payload is compared as JSON when it and the job's payload are both JSON, so spacing and
	// key order do not matter. Else it is compared byte for byte. A nil Payload matches any.
	Payload []byte
	// Metadata pairs must each be on the job; the job may have others.
	Metadata map[string]string
	// Status is the job's status now (a delayed job is status.Scheduled). Completed
	// and canceled jobs need ID.
	Status status.Status
	// MaxRetries is the job's retry limit (pipeline.WithMaxRetries); new(0) for none.
	MaxRetries *int
	// Timeout is the job's per-attempt timeout (pipeline.WithTimeout).
	Timeout time.Duration
	// NotBefore: the job must not be due before it (pipeline.WithDelay, pipeline.WithRunAt).
	NotBefore time.Time
}

// Enqueued returns the jobs of queue that match want, in the order Inspector.List gives them
// (by status: scheduled, queued, in_progress, failed). Completed and canceled jobs, which
// Inspector.List also lists, are not looked through (they are no longer enqueued): they are
// found by Want.ID only.
func Enqueued(ctx context.Context, insp *pipeline.Inspector, queue string, want Want) ([]*pipeline.Job, error) {
	if want.Type == "" {
		return nil, fmt.Errorf("pipelinetest: Want.Type is required")
	}
	jobs, err := candidates(ctx, insp, queue, want)
	if err != nil {
		return nil, err
	}
	var out []*pipeline.Job
	for _, j := range jobs {
		if mismatch(j, want) == "" {
			out = append(out, j)
		}
	}
	return out, nil
}

// RequireEnqueued fails tb unless queue holds a job that matches want, and returns the first
// such job. The failure names each job of the type that was found and how it differs.
func RequireEnqueued(ctx context.Context, tb testing.TB, insp *pipeline.Inspector, queue string, want Want) *pipeline.Job {
	tb.Helper()
	if want.Type == "" {
		tb.Fatalf("pipelinetest: Want.Type is required")
	}
	jobs, err := candidates(ctx, insp, queue, want)
	if err != nil {
		tb.Fatalf("pipelinetest: read queue %s: %v", queue, err)
	}
	var why []string
	for _, j := range jobs {
		d := mismatch(j, want)
		if d == "" {
			return j
		}
		if strings.HasPrefix(d, "type ") {
			continue
		}
		why = append(why, fmt.Sprintf("job %s: %s", j.ID, d))
	}
	if len(why) == 0 {
		tb.Fatalf("pipelinetest: queue %s holds no job of type %q", queue, want.Type)
	} else {
		tb.Fatalf("pipelinetest: queue %s holds no job of type %q as wanted:\n  %s", queue, want.Type, strings.Join(why, "\n  "))
	}
	return nil
}

// RequireNotEnqueued fails tb if queue holds a job that matches want.
func RequireNotEnqueued(ctx context.Context, tb testing.TB, insp *pipeline.Inspector, queue string, want Want) {
	tb.Helper()
	jobs, err := Enqueued(ctx, insp, queue, want)
	if err != nil {
		tb.Fatalf("pipelinetest: read queue %s: %v", queue, err)
	}
	if len(jobs) > 0 {
		tb.Fatalf("pipelinetest: queue %s holds %d job(s) of type %q as described, the first %s (status %s)",
			queue, len(jobs), want.Type, jobs[0].ID, jobs[0].Status)
	}
}

// listed are the statuses Inspector.List reads whose jobs a gauge counts (those not kept for
// a while only), in the order Enqueued reports jobs.
var listed = func() []status.Status {
	var out []status.Status
	for _, s := range status.Listable() {
		if _, ok := (&pipeline.QueueStats{}).Gauge(s); ok {
			out = append(out, s)
		}
	}
	return out
}()

// candidates reads the job want.ID, or every job of queue (of want.Status when it is set).
func candidates(ctx context.Context, insp *pipeline.Inspector, queue string, want Want) ([]*pipeline.Job, error) {
	if want.ID != "" {
		j, err := insp.Get(ctx, queue, want.ID)
		if errors.Is(err, pipeline.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return []*pipeline.Job{j}, nil
	}
	statuses := listed
	if want.Status.Final() && want.Status != status.Failed {
		return nil, fmt.Errorf("%s jobs are found by id only: set Want.ID", want.Status)
	}
	if want.Status != "" {
		statuses = []status.Status{want.Status}
	}
	var out []*pipeline.Job
	for _, st := range statuses {
		for page := (pipeline.Page{}); ; {
			p, err := insp.List(ctx, queue, st, page)
			if err != nil {
				return nil, fmt.Errorf("list %s jobs: %w", st, err)
			}
			out = append(out, p.Jobs...)
			if p.Next == "" {
				break
			}
			page.Cursor = p.Next
		}
	}
	return out, nil
}

// mismatch says how j differs from want, or "" when it matches.
func mismatch(j *pipeline.Job, want Want) string {
	var d []string
	if j.Type != want.Type {
		return fmt.Sprintf("type %q", j.Type)
	}
	if want.Payload != nil && !samePayload(j.Payload, want.Payload) {
		d = append(d, fmt.Sprintf("payload %q, want %q", j.Payload, want.Payload))
	}
	for k, v := range want.Metadata {
		if got, ok := j.Metadata[k]; !ok || got != v {
			d = append(d, fmt.Sprintf("metadata %v, want %s=%q", j.Metadata, k, v))
		}
	}
	if want.Status != "" && j.Status != want.Status {
		d = append(d, fmt.Sprintf("status %s, want %s", j.Status, want.Status))
	}
	if want.MaxRetries != nil && j.MaxRetries != *want.MaxRetries {
		d = append(d, fmt.Sprintf("max retries %d, want %d", j.MaxRetries, *want.MaxRetries))
	}
	if want.Timeout != 0 && j.Timeout != want.Timeout {
		d = append(d, fmt.Sprintf("timeout %s, want %s", j.Timeout, want.Timeout))
	}
	// Redis keeps times to the millisecond.
	if !want.NotBefore.IsZero() && j.RunAt.Before(want.NotBefore.Truncate(time.Millisecond)) {
		d = append(d, fmt.Sprintf("due at %s, want not before %s", j.RunAt.Format(time.RFC3339Nano), want.NotBefore.Format(time.RFC3339Nano)))
	}
	return strings.Join(d, "; ")
}

func samePayload(got, want []byte) bool {
	if bytes.Equal(got, want) {
		return true
	}
	var g, w any
	if json.Unmarshal(got, &g) != nil || json.Unmarshal(want, &w) != nil {
		return false
	}
	return reflect.DeepEqual(g, w)
}
