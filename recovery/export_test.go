package recovery

import (
	"context"
	"time"
)

// MinVisibilityTimeout is minVisibilityTimeout, for tests.
const MinVisibilityTimeout = minVisibilityTimeout

// ErrFenced is errFenced, for tests.
var ErrFenced = errFenced

// ScanWithToken runs one scan as if the caller held the lock with token, whether it does or
// not, so tests can show the script's fence.
func (r *Recoverer) ScanWithToken(ctx context.Context, token string) (Result, error) {
	var res Result
	_, _, err := r.scan(ctx, token, &res)
	return res, err
}

// SkipTrust makes r recover every entry idle past the visibility timeout, as if it had watched
// Redis without a gap for a lease period and listed the entry before, so that tests of what a
// scan does need not wait for that. Tests of the trust itself do not use it.
func (r *Recoverer) SkipTrust() *Recoverer {
	r.skipTrust = true
	return r
}

// SkewClock adds d to every later reading of Redis's clock, as if Redis's clock jumped by d.
func (r *Recoverer) SkewClock(d time.Duration) { r.skew.Add(int64(d)) }

// Watching reports whether r trusts idle times now (it has watched Redis for a lease period
// since it started or since its last gap) and how many gaps it saw so far.
func (r *Recoverer) Watching() (trusted bool, gaps int) {
	_, trusted, _ = r.watch.sightings(time.Now())
	r.watch.mu.Lock()
	defer r.watch.mu.Unlock()
	return trusted, r.watch.epoch
}

// PruneOlderThan prunes without the lock and with any idle threshold, bypassing the
// 3x-visibility-timeout floor, so tests can show that consumers with pending entries survive.
func (r *Recoverer) PruneOlderThan(ctx context.Context, idle time.Duration) (int, error) {
	var res Result
	err := r.prune(ctx, "", idle, &res)
	return res.Pruned, err
}

// Add adds o's counts to r, for tests that total several scans.
func (r *Result) Add(o Result) { r.add(o) }
