package pipeline

import (
	"cmp"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/stream"
)

// Metadata keys the worker's unmarshaller adds to each Watermill message, beside the job's own
// metadata (whose keys may not start with '_'). Watermill middleware can read them.
const (
	// MetaJob holds the entry's job field, "<attempt> <max_retries> <timeout_ms> <type>".
	MetaJob = "_conveyor_job"
	// MetaType holds the job's type.
	MetaType = "_conveyor_type"
	// metaForeign marks a message from an entry of another Watermill publisher (no conveyor
	// field, no job record yet), which the worker adopts as a job before its handler runs.
	metaForeign = "_conveyor_foreign"
)

// reservedMeta counts the metadata keys every readable message carries besides the job's own.
const reservedMeta = 4 // MetaJob, MetaType, stream.EntryIDKey and stream.StreamKey

// entryUnmarshaller reads a Conveyor stream entry into a Watermill message. It never fails: an
// entry it cannot read becomes a message marked with stream.PoisonKey, which the worker sends
// to the dead set with the reason (an unmarshal error would stop the whole subscription).
//
// An entry of another Watermill publisher (a valid message UUID and metadata, and no conveyor
// field) is read as a job to adopt: its type is its MetaKeyType metadata, else defaultType;
// its retries and timeout come from MetaKeyMaxRetries and MetaKeyTimeout, else the defaults.
type entryUnmarshaller struct {
	defaultType string
}

func (u entryUnmarshaller) Unmarshal(streamName, id string, values map[string]any) *message.Message {
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
	job, hasJob := str(keys.EntryJob)
	_, _, _, typ, jobOK := keys.ParseEntryJob(job)
	switch {
	case reason != "":
	case !keys.ValidID(uuid):
		reason = "missing or invalid " + keys.EntryUUID
	case !hasJob && values[keys.EntryJob] == nil:
		job, typ, reason = u.foreign(md)
		if reason == "" {
			md[metaForeign] = "1"
		}
	case !jobOK:
		reason = "missing or malformed " + keys.EntryJob + " field"
	}
	if reason != "" {
		if msg.UUID == "" {
			msg.UUID = watermill.NewUUID()
		}
		md[stream.PoisonKey] = "unreadable stream entry " + id + ": " + reason
		return msg
	}
	md[MetaJob] = job
	md[MetaType] = typ
	return msg
}

// foreign reads the job of an entry of another Watermill publisher from its metadata: its
// job field (as Conveyor would have written it, attempt 1) and type, or why it cannot be run.
func (u entryUnmarshaller) foreign(md message.Metadata) (job, typ, reason string) {
	typ = cmp.Or(md[MetaKeyType], u.defaultType)
	if typ == "" {
		return "", "", "a message of another publisher without " + MetaKeyType + " metadata, and the worker has no DefaultType"
	}
	if err := validateType(typ); err != nil {
		return "", "", MetaKeyType + ": " + err.Error()
	}
	retries := DefaultMaxRetries
	if v, ok := md[MetaKeyMaxRetries]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > MaxMaxRetries {
			return "", "", fmt.Sprintf("%s %q: want 0..%d", MetaKeyMaxRetries, v, MaxMaxRetries)
		}
		retries = n
	}
	var timeout time.Duration
	if v, ok := md[MetaKeyTimeout]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return "", "", fmt.Sprintf("%s %q: want a duration such as 30s", MetaKeyTimeout, v)
		}
		timeout = d
	}
	return keys.FormatEntryJob(1, retries, timeout.Milliseconds(), typ), typ, ""
}

// jobFromMessage builds the handler's view of a job from a message made by entryUnmarshaller.
func jobFromMessage(queue string, msg *message.Message) *Job {
	md := msg.Metadata
	attempt, maxRetries, timeout, typ, _ := keys.ParseEntryJob(md[MetaJob])
	j := &Job{
		ID: msg.UUID, Queue: queue, Type: typ, Payload: msg.Payload,
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
