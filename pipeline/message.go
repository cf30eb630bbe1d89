package pipeline

import (
	"encoding/json"
	"strconv"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/stream"
)

// Metadata keys the worker's unmarshaller adds to each Watermill message, beside the job's own
// metadata (whose keys may not start with '_'). Watermill middleware can read them.
const (
	MetaType       = "_conveyor_type"
	MetaAttempt    = "_conveyor_attempt"
	MetaMaxRetries = "_conveyor_max_retries"
	MetaTimeoutMS  = "_conveyor_timeout_ms"
	// MetaRaw holds an unreadable entry's fields as JSON, for its dead record.
	MetaRaw = "_conveyor_raw"
)

// reservedMeta counts the metadata keys every message carries besides the job's own.
const reservedMeta = 6 // the four above, stream.EntryIDKey and stream.StreamKey

// entryUnmarshaller reads a Conveyor stream entry into a Watermill message. It never fails: an
// entry it cannot read becomes a message marked with stream.PoisonKey, which the worker sends
// to the dead set with the reason (an unmarshal error would stop the whole subscription).
type entryUnmarshaller struct{}

func (entryUnmarshaller) Unmarshal(streamName, id string, values map[string]any) *message.Message {
	str := func(k string) (string, bool) { s, ok := values[k].(string); return s, ok }
	uuid, _ := str(keys.EntryUUID)
	payload, _ := str(keys.EntryPayload)
	msg := message.NewMessage(uuid, []byte(payload))
	md := msg.Metadata

	// The job's own metadata first, so that the reserved keys set below (among them the entry
	// id, the fencing token) cannot be overridden by what an entry carries.
	reason := ""
	if enc, _ := str(keys.EntryMetadata); enc != "" {
		if err := stream.DecodeMetadata(enc, md); err != nil {
			reason = err.Error()
		}
		for k := range md {
			if k == "" || k[0] == '_' {
				reason = "reserved metadata key " + strconv.Quote(k)
				delete(md, k)
			}
		}
	}
	md[stream.EntryIDKey] = id
	md[stream.StreamKey] = streamName
	typ, _ := str(keys.EntryType)
	attempt, aok := str(keys.EntryAttempt)
	maxRetries, mok := str(keys.EntryMaxRetries)
	timeout, tok := str(keys.EntryTimeout)
	switch {
	case reason != "":
	case !keys.ValidID(uuid):
		reason = "missing or invalid " + keys.EntryUUID
	case typ == "":
		reason = "missing " + keys.EntryType
	case !aok || !positive(attempt, 1):
		reason = "missing or invalid " + keys.EntryAttempt
	case !mok || !positive(maxRetries, 0):
		reason = "missing or invalid " + keys.EntryMaxRetries
	case !tok || !positive(timeout, 0):
		reason = "missing or invalid " + keys.EntryTimeout
	}
	if reason != "" {
		if msg.UUID == "" {
			msg.UUID = watermill.NewUUID()
		}
		raw, _ := json.Marshal(values)
		md[stream.PoisonKey] = "unreadable stream entry " + id + ": " + reason
		md[MetaRaw] = string(raw)
		md[MetaType] = typ
		return msg
	}
	md[MetaType] = typ
	md[MetaAttempt] = attempt
	md[MetaMaxRetries] = maxRetries
	md[MetaTimeoutMS] = timeout
	return msg
}

// positive reports whether s is a decimal integer >= floor that fits an int32.
func positive(s string, floor int64) bool {
	n, err := strconv.ParseInt(s, 10, 32)
	return err == nil && n >= floor
}

// jobFromMessage builds the handler's view of a job from a message made by entryUnmarshaller.
func jobFromMessage(queue string, msg *message.Message) *Job {
	md := msg.Metadata
	attempt, _ := strconv.Atoi(md[MetaAttempt])
	maxRetries, _ := strconv.Atoi(md[MetaMaxRetries])
	timeout, _ := strconv.ParseInt(md[MetaTimeoutMS], 10, 64)
	j := &Job{
		ID: msg.UUID, Queue: queue, Type: md[MetaType], Payload: msg.Payload,
		Status: StatusInProgress, Attempt: attempt, MaxRetries: maxRetries,
		Timeout: msToDuration(timeout), Entry: md[stream.EntryIDKey],
		EnqueuedAt: stream.EntryTime(md[stream.EntryIDKey]),
	}
	if len(md) > reservedMeta {
		j.Metadata = make(map[string]string, len(md)-reservedMeta)
		for k, v := range md {
			if len(k) == 0 || k[0] != '_' {
				j.Metadata[k] = v
			}
		}
	}
	return j
}
