package pipeline

import (
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/conveyorq/conveyor/internal/control"
	"github.com/conveyorq/conveyor/internal/engine"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/metakey"
	"github.com/conveyorq/conveyor/status"
	"github.com/conveyorq/conveyor/stream"
)

// Metadata keys the worker's unmarshaller adds to each Watermill message, beside the job's own
// metadata (whose keys may not start with '_'). Watermill middleware can read them. They are
// the engine's (engine.MetaJob and its neighbours); metaType is public as metakey.EntryType.
const (
	metaJob      = engine.MetaJob
	metaType     = engine.MetaType
	metaForeign  = engine.MetaForeign
	metaLimitKey = engine.MetaLimitKey
)

// reservedMeta counts the metadata keys every readable message carries besides the job's own.
const reservedMeta = 4 // metaJob, metaType, stream.EntryIDKey and stream.StreamKey

// entryUnmarshaller reads a Conveyor stream entry into a Watermill message. It never fails,
// since an unmarshal error would stop the whole subscription. An entry it cannot read becomes
// a message marked with stream.PoisonKey. The worker sends that to the dead set with the
// reason.
//
// An entry of another Watermill publisher (a valid message UUID and metadata, and no conveyor
// field) is read as a job to adopt (foreign), its type defaultType unless metakey.Type says.
// A key only the Publisher can apply (control.PublisherOnly) makes it unreadable.
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
		var adopt string
		job, typ, adopt, reason = u.foreign(md, id)
		if reason == "" {
			md[metaForeign] = adopt
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
	md[metaJob] = job
	md[metaType] = typ
	if k, ok := str(keys.EntryLimitKey); ok && k != "" {
		md[metaLimitKey] = k
	}
	return msg
}

// foreign reads the job of an entry of another Watermill publisher from its metadata, by the
// Publisher's rules (controlOptions). It returns its job field (as Conveyor would have written
// it, attempt 1), and its type. It returns what adopting it takes (engine.Adoption, the value
// of metaForeign), or why it cannot be run. A delay counts from the entry's time, the moment it
// was published.
func (u entryUnmarshaller) foreign(md message.Metadata, entry string) (job, typ, adopt, reason string) {
	ctrl, reason := control.Adoptable(md, u.defaultType)
	if reason != "" {
		return "", "", "", reason
	}
	t := Task{Type: u.defaultType}
	_, o, err := controlOptions(ctrl, &t, defaultUniqueTTL)
	if err != nil {
		return "", "", "", reasonOf(err)
	}
	runAt, err := o.dueAt(stream.EntryTime(entry))
	if err != nil {
		return "", "", "", metakey.RunAt + ": " + reasonOf(err)
	}
	retries := defaultMaxRetries
	if o.hasRetries {
		retries = o.maxRetries
	}
	a := engine.Adoption{RunAt: runAt.UnixMilli()}
	if o.hasUnique {
		a.UniqueKey, a.UniqueTTL = o.uniqueKey, max(1, o.uniqueTTL.Milliseconds())
	}
	return keys.FormatEntryJob(1, retries, timeoutMS(o.timeout), t.Type), t.Type, a.String(), ""
}

// reasonOf is an input error as the reason of a dead record: without ErrInvalid's words.
func reasonOf(err error) string {
	return strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": ")
}

// jobFromMessage builds the handler's view of a job from a message made by entryUnmarshaller.
func jobFromMessage(queue string, msg *message.Message) *Job {
	md := msg.Metadata
	attempt, maxRetries, timeout, typ, _ := keys.ParseEntryJob(md[metaJob])
	j := &Job{
		ID: msg.UUID, Queue: queue, Type: typ, Payload: msg.Payload,
		Status: status.InProgress, Attempt: attempt, MaxRetries: maxRetries,
		Timeout: msToDuration(timeout), Entry: md[stream.EntryIDKey],
		EnqueuedAt: stream.EntryTime(md[stream.EntryIDKey]),
	}
	reserved := reservedMeta
	if _, ok := md[metaLimitKey]; ok {
		reserved++
	}
	if len(md) > reserved {
		j.Metadata = make(map[string]string, len(md)-reserved)
		for k, v := range md {
			if len(k) == 0 || k[0] != '_' {
				j.Metadata[k] = v
			}
		}
	}
	return j
}
