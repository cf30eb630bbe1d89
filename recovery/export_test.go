package recovery

import "context"

// ErrFenced is errFenced, for tests.
var ErrFenced = errFenced

// ScanWithToken runs one scan as if the caller held the lock with token, whether it does or
// not, so tests can show the script's fence.
func (r *Recoverer) ScanWithToken(ctx context.Context, token string) (Result, error) {
	var res Result
	err := r.scan(ctx, token, &res)
	return res, err
}
