package script

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// Lua's unpack fails past about 8,000 values; cv_call_list and cv_drop must take lists of any
// length (promote.lua with a batch of 8,000 never drained before they did).
func TestCallListTakesLongLists(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	key, stream := redistest.UniqueName(t), redistest.UniqueName(t)
	const n = 20000
	members := make([]redis.Z, n)
	for i := range members {
		members[i] = redis.Z{Score: float64(i), Member: fmt.Sprint(i)}
	}
	if err := rdb.ZAdd(ctx, key, members...).Err(); err != nil {
		t.Fatal(err)
	}
	s := New(`
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
cv_call_list('ZREM', KEYS[1], {}, ids)
local e = {}
for i = 1, tonumber(ARGV[1]) do e[i] = redis.call('XADD', KEYS[2], '*', 'f', i) end
redis.call('XGROUP', 'CREATE', KEYS[2], 'g', '0')
redis.call('XREADGROUP', 'GROUP', 'g', 'c', 'STREAMS', KEYS[2], '>')
cv_drop(KEYS[2], 'g', e)
return {redis.call('ZCARD', KEYS[1]), redis.call('XLEN', KEYS[2]), redis.call('XPENDING', KEYS[2], 'g')[1]}`)
	got, err := s.Run(ctx, rdb, []string{key, stream}, 9000).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[0 0 0]" {
		t.Fatalf("left behind (zcard, xlen, pending): %v", got)
	}
}
