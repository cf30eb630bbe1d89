package redistest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// oomTimeout bounds each CONFIG call of RefuseWrites and its restore.
const oomTimeout = 10 * time.Second

// RefuseWrites makes the server refuse writes as if it were out of memory. It
// sets maxmemory to 1 byte with maxmemory-policy noeviction. So every command
// that may use memory fails with "OOM command not allowed when used memory >
// 'maxmemory'". Those are SET, XADD, EVALSHA of a writing script, and so on.
// Reads, DEL and connection commands still work.
//
// restore sets both settings back to their values before the call. It is
// idempotent. It is also called in tb.Cleanup if the test did not call it and
// the server is still running. It reports failures with tb.Errorf.
//
// It fails the test (tb.Fatal) on the Shared server, whose other users would
// see the failures. Use it on a server of the test's own (Start).
func (s *Server) RefuseWrites(tb testing.TB) (restore func()) {
	tb.Helper()
	shared.Lock()
	isShared := s == shared.srv
	shared.Unlock()
	if isShared {
		tb.Fatal("redistest: RefuseWrites on the Shared server; use a private server (Start)")
	}

	c := s.adminClient()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), oomTimeout)
	defer cancel()
	old, err := c.ConfigGet(ctx, "maxmemory*").Result()
	if err != nil {
		tb.Fatalf("redistest: CONFIG GET maxmemory*: %v", err)
	}
	if err := configSet(ctx, c, "maxmemory-policy", "noeviction", "maxmemory", "1"); err != nil {
		tb.Fatal(err)
	}

	var once sync.Once
	restore = func() {
		once.Do(func() {
			c := s.adminClient()
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), oomTimeout)
			defer cancel()
			// maxmemory first: with it back, the policy change cannot matter.
			if err := configSet(ctx, c, "maxmemory", old["maxmemory"], "maxmemory-policy", old["maxmemory-policy"]); err != nil {
				tb.Errorf("redistest: restoring writes: %v", err)
			}
		})
	}
	tb.Cleanup(func() {
		if s.PID() != 0 {
			restore()
		}
	})
	return restore
}

// adminClient returns a client to s for one-off administrative commands,
// without retries. The caller closes it.
func (s *Server) adminClient() *redis.Client {
	o := s.options()
	o.MaxRetries = -1
	return redis.NewClient(o)
}

// configSet runs CONFIG SET name value for each pair, in order.
func configSet(ctx context.Context, c *redis.Client, pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := c.ConfigSet(ctx, pairs[i], pairs[i+1]).Err(); err != nil {
			return fmt.Errorf("redistest: CONFIG SET %s %s: %w", pairs[i], pairs[i+1], err)
		}
	}
	return nil
}
