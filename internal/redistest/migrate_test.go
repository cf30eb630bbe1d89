package redistest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestMigrateSlot moves a slot of 25 keys to another master in batches of 4 and back in one
// batch: between batches the keys are split over the two nodes and a cluster client reads and
// writes every one of them (ASK); afterwards every key is on the new owner, none on the old,
// and a client with the old slot map follows MOVED.
func TestMigrateSlot(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	ctx := t.Context()
	cc := c.Client(t)
	const n = 25
	key := func(i int) string { return fmt.Sprintf("{a}migrate:%d", i) } // slot 15495
	for i := range n {
		if err := cc.Set(ctx, key(i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	src, dst, slot := c.SlotNodes(t, cc, key(0))
	from, to := src.Options().Addr, dst.Options().Addr
	countIn := func(r *redis.Client) int64 {
		k, err := r.ClusterCountKeysInSlot(ctx, slot).Result()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	readAll := func() {
		t.Helper()
		for i := range n {
			if got, err := cc.Get(ctx, key(i)).Int(); err != nil || got != i {
				t.Fatalf("GET %s = %d, %v", key(i), got, err)
			}
		}
	}

	// A client that learns the slot map before the move and keeps it.
	stale := c.Client(t)
	if err := stale.Get(ctx, key(3)).Err(); err != nil {
		t.Fatal(err)
	}

	batches := 0
	err := c.MigrateSlot(ctx, slot, to, redistest.SlotMove{Batch: 4, Between: func(_ context.Context, moved int) error {
		batches++
		extra := int64(0) // the new key, on the target from the first batch on
		if batches > 1 {
			extra = 1
		}
		if s, d := countIn(src), countIn(dst); s+d != n+extra || d != int64(moved)+extra {
			return fmt.Errorf("after %d moved: source %d keys, target %d", moved, s, d)
		}
		readAll()
		// A new key of the slot goes to the target (ASK), an existing one is written where it is.
		return cc.Set(ctx, "{a}migrate:new", batches, 0).Err()
	}})
	if err != nil {
		t.Fatal(err)
	}
	if batches < n/4 {
		t.Fatalf("%d batches, want at least %d", batches, n/4)
	}
	if s, d := countIn(src), countIn(dst); s != 0 || d != n+1 {
		t.Fatalf("after the move: source %d keys, target %d (want 0, %d)", s, d, n+1)
	}
	if got, _ := redistest.MasterOf(ctx, cc, key(0)); got != to {
		t.Fatalf("owner %s, want %s", got, to)
	}
	readAll()
	// The client that learnt the old map before the move follows MOVED.
	if got, err := stale.Get(ctx, key(3)).Int(); err != nil || got != 3 {
		t.Fatalf("stale client: %d, %v", got, err)
	}

	// Back in one batch, and a second move to the same owner is a no-op.
	if err := c.MigrateSlot(ctx, slot, from, redistest.SlotMove{Batch: 100}); err != nil {
		t.Fatal(err)
	}
	if err := c.MigrateSlot(ctx, slot, from, redistest.SlotMove{}); err != nil {
		t.Fatal(err)
	}
	if s, d := countIn(src), countIn(dst); s != n+1 || d != 0 {
		t.Fatalf("after the move back: source %d keys, target %d", s, d)
	}
	readAll()
	if err := c.MigrateSlot(ctx, slot, "127.0.0.1:1", redistest.SlotMove{}); err == nil {
		t.Fatal("a move to a non-member succeeded")
	}
}

// TestHalfMovedSlotRules pins what Redis Cluster does to scripts while a slot is half-moved,
// which docs/RELIABILITY.md ("a cluster slot migrated under load") builds on: a script whose
// declared keys are split between the nodes, or partly absent, is refused (TRYAGAIN); one that
// touches an undeclared key already moved fails there, after its earlier writes, which stay.
func TestHalfMovedSlotRules(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	ctx := t.Context()
	cc := c.Client(t)
	a, b := "{a}rules:1", "{a}rules:2"
	for _, k := range []string{a, b} {
		if err := cc.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	slot := int(cc.ClusterKeySlot(ctx, a).Val())
	from, err := redistest.MasterOf(ctx, cc, a)
	if err != nil {
		t.Fatal(err)
	}
	to := c.Addrs[0]
	if to == from {
		to = c.Addrs[1]
	}
	src := redis.NewClient(&redis.Options{Addr: from, MaxRetries: -1})
	t.Cleanup(func() { _ = src.Close() })
	checked := false
	err = c.MigrateSlot(ctx, slot, to, redistest.SlotMove{Batch: 1, Between: func(ctx context.Context, moved int) error {
		if moved != 1 {
			return nil
		}
		checked = true
		here, gone := a, b // one of the two moved
		if n, _ := src.Exists(ctx, a).Result(); n == 0 {
			here, gone = b, a
		}
		errText := func(e error) string {
			if e == nil {
				return "<nil>"
			}
			return e.Error()
		}
		// Declared keys split between the nodes: refused before the script runs.
		err := src.Eval(ctx, "return redis.call('GET', KEYS[1])", []string{here, gone}).Err()
		if !strings.HasPrefix(errText(err), "TRYAGAIN") {
			t.Errorf("split keys: %v, want TRYAGAIN", err)
		}
		// A declared key that exists nowhere yet (a new job's record): refused alike.
		err = src.Eval(ctx, "return redis.call('GET', KEYS[1])", []string{here, "{a}rules:new"}).Err()
		if !strings.HasPrefix(errText(err), "TRYAGAIN") {
			t.Errorf("an absent declared key: %v, want TRYAGAIN", err)
		}
		// An undeclared key already moved: the script fails there, its first write kept.
		err = src.Eval(ctx, "redis.call('SET', KEYS[1], 'written'); return redis.call('GET', ARGV[1])",
			[]string{here}, gone).Err()
		if !strings.Contains(errText(err), "non local key") {
			t.Errorf("an undeclared moved key: %v, want a non local key error", err)
		}
		if v, _ := src.Get(ctx, here).Result(); v != "written" {
			t.Errorf("the write before the failing command: %q, want it kept", v)
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !checked {
		t.Fatal("no half-moved state seen")
	}
}
