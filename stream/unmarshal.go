package stream

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/vmihailenco/msgpack"

	"github.com/conveyorq/conveyor/internal/keys"
)

// Metadata keys the Subscriber sets on every message.
const (
	// EntryIDKey holds the id of the stream entry the message came from.
	EntryIDKey = "_stream_entry_id"
	// StreamKey holds the name of the stream (the subscribed topic).
	StreamKey = "_stream"
	// PoisonKey is set, to the reason, on a message made from an entry that could not be read.
	PoisonKey = "_stream_poison"
)

// Field names of watermill-redisstream's stream layout (defined once, in internal/keys, beside
// Conveyor's own entry field).
const (
	FieldUUID     = keys.EntryUUID
	FieldPayload  = keys.EntryPayload
	FieldMetadata = keys.EntryMetadata
)

// Unmarshaller turns a stream entry into a message. It must not fail: an entry it cannot read
// becomes a message with PoisonKey set, so the application can dead-letter it and go on.
type Unmarshaller interface {
	Unmarshal(stream, id string, values map[string]any) *message.Message
}

// DefaultUnmarshaller reads watermill-redisstream's layout: _watermill_message_uuid, payload
// and metadata (a msgpack map of strings).
type DefaultUnmarshaller struct{}

// Unmarshal implements Unmarshaller.
func (DefaultUnmarshaller) Unmarshal(stream, id string, values map[string]any) *message.Message {
	uuid, _ := values[FieldUUID].(string)
	payload, _ := values[FieldPayload].(string)
	msg := message.NewMessage(uuid, []byte(payload))
	if uuid == "" {
		msg.UUID = watermill.NewUUID()
		msg.Metadata.Set(PoisonKey, "missing "+FieldUUID)
	} else if md, ok := values[FieldMetadata].(string); ok && md != "" {
		if err := DecodeMetadata(md, msg.Metadata); err != nil {
			msg.Metadata.Set(PoisonKey, err.Error())
		}
	}
	msg.Metadata.Set(EntryIDKey, id)
	msg.Metadata.Set(StreamKey, stream)
	return msg
}

// DecodeMetadata decodes watermill-redisstream's msgpack metadata into md. On error md is left
// as it was.
func DecodeMetadata(s string, md message.Metadata) (err error) {
	// Entries are untrusted input and msgpack v4 is no longer maintained: a decoder panic must
	// become a poison message, not stop the worker. (FuzzUnmarshal has found none so far.)
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("unreadable metadata: decoder panic: %v", r)
		}
	}()
	var m map[string]string
	if err := msgpack.Unmarshal([]byte(s), &m); err != nil {
		return fmt.Errorf("unreadable metadata: %w", err)
	}
	for k, v := range m {
		md[k] = v
	}
	return nil
}

// EncodeMetadata encodes md as watermill-redisstream does (msgpack); empty metadata encodes to
// an empty string.
func EncodeMetadata(md map[string]string) (string, error) {
	if len(md) == 0 {
		return "", nil
	}
	b, err := msgpack.Marshal(md)
	if err != nil {
		return "", fmt.Errorf("encode metadata: %w", err)
	}
	return string(b), nil
}
