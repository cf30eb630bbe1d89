package hostile

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// State is what a refused input must leave as it was. That is every key name, and the server's
// count of writes since its last save (INFO persistence rdb_changes_since_last_save). The count
// grows with every write, even one that rewrites a value as it was, and with saving off. Compare
// two States of a server nothing else writes to.
type State struct {
	Keys   []string
	Writes int64
}

// Read returns the State of rdb's database.
func Read(ctx context.Context, rdb redis.UniversalClient) (State, error) {
	var s State
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		s.Keys = append(s.Keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return s, err
	}
	slices.Sort(s.Keys)
	info, err := rdb.Info(ctx, "persistence").Result()
	if err != nil {
		return s, err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "rdb_changes_since_last_save:"); ok {
			s.Writes, err = strconv.ParseInt(v, 10, 64)
			return s, err
		}
	}
	return s, fmt.Errorf("INFO persistence has no rdb_changes_since_last_save")
}

// Diff describes what changed from s to after, or returns "" when nothing did.
func (s State) Diff(after State) string {
	var parts []string
	if after.Writes != s.Writes {
		parts = append(parts, fmt.Sprintf("%d writes", after.Writes-s.Writes))
	}
	for _, k := range after.Keys {
		if _, found := slices.BinarySearch(s.Keys, k); !found {
			parts = append(parts, "new key "+strconv.Quote(k))
		}
	}
	for _, k := range s.Keys {
		if _, found := slices.BinarySearch(after.Keys, k); !found {
			parts = append(parts, "deleted key "+strconv.Quote(k))
		}
	}
	return strings.Join(parts, ", ")
}

// NothingWritten runs f and fails t when f wrote anything to rdb, which nothing else may write
// to meanwhile.
func NothingWritten(t testing.TB, rdb redis.UniversalClient, f func()) {
	t.Helper()
	before, err := Read(t.Context(), rdb)
	if err != nil {
		t.Fatal(err)
	}
	f()
	after, err := Read(t.Context(), rdb)
	if err != nil {
		t.Fatal(err)
	}
	if d := before.Diff(after); d != "" {
		t.Fatalf("a refused call wrote to Redis: %s", d)
	}
}
