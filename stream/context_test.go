package stream

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestEntryValues(t *testing.T) {
	checkLeaks(t)

	t.Run("NotAMessage", func(t *testing.T) {
		t.Parallel()
		v, ok := EntryValues(context.Background())
		assert.False(t, ok)
		assert.Nil(t, v)
	})

	t.Run("SurviveMiddleware", func(t *testing.T) {
		// A middleware changes the payload in place and replaces it; the handler still sees
		// the entry's fields as read, through the context the router derived.
		t.Parallel()
		rdb := redistest.Client(t)
		topic := redistest.UniqueName(t)
		md, err := EncodeMetadata(map[string]string{"k": "v"})
		require.NoError(t, err)
		want := map[string]any{FieldUUID: "u1", FieldPayload: "payload", FieldMetadata: md, "extra": "x"}
		xadd(t, rdb, topic, FieldUUID, "u1", FieldPayload, "payload", FieldMetadata, md, "extra", "x")
		sub := newTestSubscriber(t, rdb, Config{ManualSettle: true})

		router, err := message.NewRouter(message.RouterConfig{CloseTimeout: time.Second}, watermill.NopLogger{})
		require.NoError(t, err)
		router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
			return func(msg *message.Message) ([]*message.Message, error) {
				defer sub.Settle(msg)
				for i := range msg.Payload {
					msg.Payload[i] = 'X'
				}
				msg.Metadata.Set(FieldUUID, "changed")
				return h(msg)
			}
		})
		type seen struct {
			payload string
			values  map[string]any
			ok      bool
		}
		got := make(chan seen, 1)
		router.AddConsumerHandler("h", topic, sub, func(msg *message.Message) error {
			v, ok := EntryValues(msg.Context())
			got <- seen{string(msg.Payload), v, ok}
			return nil
		})
		done := make(chan error, 1)
		go func() { done <- router.Run(t.Context()) }()
		var s seen
		select {
		case s = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("handler not run")
		}
		require.NoError(t, router.Close())
		require.NoError(t, <-done)
		assert.Equal(t, "XXXXXXX", s.payload, "the middleware did not run first")
		require.True(t, s.ok)
		assert.Equal(t, want, s.values)
	})

	t.Run("DerivedContextsAndCopies", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		topic := redistest.UniqueName(t)
		publish(t, rdb, topic, "m", 1)
		sub := newTestSubscriber(t, rdb, Config{NackResendSleep: time.Millisecond})
		msgs, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		msg := receive(t, msgs, 5*time.Second)
		want := map[string]any{FieldUUID: "m-0", FieldPayload: "payload-0", FieldMetadata: ""}

		type key struct{}
		withValue := context.WithValue(msg.Context(), key{}, 1)
		withCancel, cancel := context.WithCancelCause(withValue)
		defer cancel(nil)
		withTimeout, cancelT := context.WithTimeout(msg.Context(), time.Hour)
		defer cancelT()
		for _, ctx := range []context.Context{msg.Context(), withValue, withCancel, withTimeout, context.WithoutCancel(msg.Context())} {
			v, ok := EntryValues(ctx)
			require.True(t, ok)
			assert.Equal(t, want, v)
		}
		assert.Equal(t, 1, withCancel.Value(key{}), "other values are not forwarded")

		// A nacked message comes back as a copy, with the same fields.
		msg.Nack()
		again := receive(t, msgs, 5*time.Second)
		v, ok := EntryValues(again.Context())
		require.True(t, ok)
		assert.Equal(t, want, v)
		again.Ack()
		// Settling cancels the message's context, and its children's.
		require.Eventually(t, func() bool { return withCancel.Err() != nil }, 5*time.Second, time.Millisecond)
	})
}

// TestEntryContextCancelPropagation checks that a context made with context.WithCancelCause
// from a message's context is registered with the message's cancel context directly: the
// context package starts a goroutine per child when it cannot find the parent's cancelCtx.
// It is a top-level test of its own, not parallel, so that nothing else starts goroutines
// meanwhile.
func TestEntryContextCancelPropagation(t *testing.T) {
	checkLeaks(t)
	mctx, cancel := context.WithCancelCause(context.WithoutCancel(t.Context()))
	d := &delivery{values: map[string]any{"f": "v"}, cancel: cancel}
	d.ctx = entryContext{mctx, d}
	const children = 1000
	before := runtime.NumGoroutine()
	var kids []context.Context
	for range children {
		k, c := context.WithCancelCause(&d.ctx)
		defer c(nil)
		kids = append(kids, k)
	}
	assert.Less(t, runtime.NumGoroutine()-before, children/10, "a goroutine per child: the slow path")
	d.cancel(ErrLeaseLost)
	for _, k := range kids {
		<-k.Done()
		require.ErrorIs(t, context.Cause(k), ErrLeaseLost)
	}
}
