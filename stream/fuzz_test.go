package stream

import (
	"maps"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
)

// FuzzUnmarshal feeds arbitrary entries to DefaultUnmarshaller and DecodeMetadata: stream
// entries are untrusted input (anyone with write access to the stream can XADD anything), and a
// panic there would stop a worker.
func FuzzUnmarshal(f *testing.F) {
	md, err := EncodeMetadata(map[string]string{"k": "v", "trace": "0af7651916cd43dd8448eb211c80319c"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("uuid-1", []byte("payload"), []byte(md), "type", []byte("email"), uint8(0))
	f.Add("", []byte{}, []byte{}, "", []byte{}, uint8(1))
	f.Add("u", []byte("p"), []byte("\xc1"), "attempt", []byte("1"), uint8(2))
	f.Add("u", []byte("p"), []byte("\xdf\xff\xff\xff\xff"), "", []byte(nil), uint8(3))     // map32 of 4G entries
	f.Add("u", []byte("p"), []byte("\x81\xdb\xff\xff\xff\xff"), "", []byte(nil), uint8(0)) // str32 of 4GB
	f.Add("u", []byte("p"), []byte("\x81\xa1k\x81\xa1a\xa1b"), "", []byte(nil), uint8(0))  // nested map value
	f.Fuzz(func(t *testing.T, uuid string, payload, metadata []byte, extraKey string, extraVal []byte, shape uint8) {
		// go-redis hands entry values over as strings; other shapes exercise a custom caller.
		values := map[string]any{FieldUUID: uuid, FieldPayload: string(payload), FieldMetadata: string(metadata)}
		switch shape % 4 {
		case 1:
			delete(values, FieldMetadata)
		case 2:
			values[FieldPayload] = payload // []byte, not string
		case 3:
			values[FieldUUID] = len(uuid) // not a string
		}
		if extraKey != "" {
			values[extraKey] = string(extraVal)
		}
		msg := DefaultUnmarshaller{}.Unmarshal("stream", "1-1", values)
		if msg == nil {
			t.Fatal("nil message")
		}
		if msg.UUID == "" {
			t.Fatal("message without UUID")
		}
		if msg.Metadata.Get(EntryIDKey) != "1-1" || msg.Metadata.Get(StreamKey) != "stream" {
			t.Fatalf("entry metadata lost: %v", msg.Metadata)
		}
		uuidOK := shape%4 != 3 && uuid != "" && (extraKey != FieldUUID)
		payloadOK := shape%4 != 2 && extraKey != FieldPayload
		mdOK := shape%4 == 1 || len(metadata) == 0
		if uuidOK && payloadOK && mdOK && extraKey != FieldMetadata {
			// A valid uuid and payload round-trip untouched.
			if msg.UUID != uuid || string(msg.Payload) != string(payload) {
				t.Fatalf("got uuid %q payload %q, want %q %q", msg.UUID, msg.Payload, uuid, payload)
			}
			if reason, bad := msg.Metadata[PoisonKey]; bad {
				t.Fatalf("valid entry marked poison: %s", reason)
			}
		}

		got := message.Metadata{}
		if err := DecodeMetadata(string(metadata), got); err == nil && len(metadata) > 0 {
			// What decodes re-encodes to the same map.
			enc, err := EncodeMetadata(got)
			if err != nil {
				t.Fatal(err)
			}
			again := message.Metadata{}
			if err := DecodeMetadata(enc, again); err != nil && len(got) > 0 {
				t.Fatalf("re-encoded metadata does not decode: %v", err)
			}
			if !maps.Equal(got, again) {
				t.Fatalf("metadata round trip: %v != %v", got, again)
			}
		}
	})
}
