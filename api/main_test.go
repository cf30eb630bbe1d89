package api_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestMain(m *testing.M) {
	// go-redis logs failed dials itself; the tests that stop Redis mean them.
	redis.SetLogger(quietRedisLog{})
	redistest.Main(m)
}

type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}
