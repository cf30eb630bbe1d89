package stream

import "context"

// EntryValues returns the fields of the stream entry that the message carrying ctx was made
// from. They are exactly as Redis returned them (field name to string value). It also reports
// whether ctx is, or derives from, the context of a message of this package's Subscriber.
//
// A message's Payload and Metadata belong to the application: middleware and handlers may change
// them in place. EntryValues gives what was read, for example to write the entry back unchanged.
// The map is shared with the Unmarshaller and every copy of the message: read it, never change
// it.
func EntryValues(ctx context.Context) (map[string]any, bool) {
	v, ok := ctx.Value(entryValuesKey{}).(map[string]any)
	return v, ok
}

type (
	entryValuesKey struct{}
	deliveryKey    struct{} // Subscriber.Settle's way to the delivery
)

// entryContext is a message's context. Its cancel context answers everything but the entry's
// fields and the delivery. It is a field of the message's delivery, so it costs no allocation of
// its own; a context.WithValue would cost one per message.
//
// Value forwards every other key to the cancel context. Among them is the key the context
// package asks to find a parent's cancelCtx. Done is the cancel context's own. So a
// context.WithCancel or WithCancelCause made from it joins that cancelCtx's children directly,
// with no goroutine to watch it.
type entryContext struct {
	context.Context
	d *delivery
}

func (c *entryContext) Value(key any) any {
	switch key {
	case entryValuesKey{}:
		return c.d.values
	case deliveryKey{}:
		return c.d
	}
	if t := c.d.t; t != nil && t.router != nil {
		if v, ok := t.router.value(key); ok {
			return v
		}
	}
	return c.Context.Value(key)
}
