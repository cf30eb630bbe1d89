package stream

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestStockSubscriberReadsConveyorEntries checks that a stream written in Conveyor's layout
// (watermill-redisstream's fields first, Conveyor's flat fields beside them) stays readable by
// the stock watermill-redisstream Subscriber.
func TestStockSubscriberReadsConveyorEntries(t *testing.T) {
	checkLeaks(t)
	md, err := EncodeMetadata(map[string]string{"trace_id": "abc", "tenant": "t1"})
	require.NoError(t, err)
	for _, tc := range []struct {
		name     string
		metadata string
		wantMD   map[string]string
	}{
		{name: "NoMetadata", metadata: ""},
		{name: "Metadata", metadata: md, wantMD: map[string]string{"trace_id": "abc", "tenant": "t1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := redistest.Client(t)
			topic := redistest.UniqueName(t)
			payload := "{\"to\":\"a@example.com\"}\x00\xff binary-safe"
			uuid := "01JDZ5R8Q2J3W4X5Y6Z7A8B9C0"
			// XADD directly, fields in Conveyor's order.
			xadd(t, rdb, topic,
				FieldUUID, uuid,
				FieldPayload, payload,
				FieldMetadata, tc.metadata,
				"conveyor", "1 25 30000 email:send",
			)

			// The stock Subscriber closes its client: it gets its own, closed again harmlessly
			// by redistest.
			sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
				Client:                        redistest.Client(t),
				ConsumerGroup:                 "stock",
				Consumer:                      "stock-1",
				BlockTime:                     50 * time.Millisecond,
				DisableIndefiniteInitialBlock: true,
				ShouldClaimPendingMessage:     func(redis.XPendingExt) bool { return false },
			}, watermill.NopLogger{})
			require.NoError(t, err)
			defer func() { require.NoError(t, sub.Close()) }()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			msgs, err := sub.Subscribe(ctx, topic)
			require.NoError(t, err)

			msg := receive(t, msgs, 10*time.Second)
			assert.Equal(t, uuid, msg.UUID)
			assert.Equal(t, payload, string(msg.Payload))
			for k, v := range tc.wantMD {
				assert.Equal(t, v, msg.Metadata.Get(k))
			}
			require.True(t, msg.Ack())
			require.Eventually(t, func() bool {
				p, err := rdb.XPending(t.Context(), topic, "stock").Result()
				return err == nil && p.Count == 0
			}, 5*time.Second, 10*time.Millisecond)
		})
	}
}
