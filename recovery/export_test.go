package recovery

import (
	"context"
	"time"
)

// ErrFenced is errFenced, for tests.
var ErrFenced = errFenced

// ScanWithToken runs one scan as if the caller held the lock with token, whether it does or
// not, so tests can show the script's fence.
func (r *Recoverer) ScanWithToken(ctx context.Context, token string) (Result, error) {
	var res Result
	err := r.scan(ctx, token, &res)
	return res, err
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
