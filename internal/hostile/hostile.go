// Package hostile holds the hostile inputs that every edge taking names and sizes must refuse.
// The refusal needs a clear error, and must write nothing to Redis. The edges are the library
// (package pipeline), the CLI (internal/cli) and the HTTP API (package api). One table serves
// the three tests, so a rule added to one edge is checked at all of them.
//
// A Case is a publish: a valid job with one field made hostile. Want holds the phrases the error
// message must contain at every edge, unless Override gives an edge's own. So a refusal for the
// wrong reason fails. Skip names the edges that cannot express a case, and why. Say, the CLI has
// no --run-at, and a time.Duration cannot hold 300 years.
//
// BadQueues and BadIDs are the names alone, for the calls that take a queue or a job id (Get,
// Cancel, List, Replay, Purge, DeleteQueue, ...). Extremes are the valid values at the limits.
// Each must be accepted, so the limits are where the documentation says.
package hostile

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// MaxNameLen mirrors keys.MaxNameLen (kept here so the table does not import what it tests).
const MaxNameLen = 128

// Edge is a way in.
type Edge string

// The edges.
const (
	Library Edge = "library"
	CLI     Edge = "cli"
	HTTP    Edge = "http"
)

// Job is a publish request in terms every edge can express.
type Job struct {
	Queue    string
	Type     string
	Payload  string // JSON text; "" for none
	ID       string
	Metadata map[string]string
	Delay    time.Duration
	RunAt    time.Time // zero: not given
	// MaxRetries is given when HasRetries.
	MaxRetries int
	HasRetries bool
	Timeout    time.Duration
	UniqueKey  string
	UniqueTTL  time.Duration // given with UniqueKey, or alone when HasUnique
	HasUnique  bool
	// DebounceKey, DebounceQuiet and DebounceMaxWait are a debounce (WithDebounce), given
	// when HasDebounce or DebounceKey is set.
	DebounceKey                    string
	DebounceQuiet, DebounceMaxWait time.Duration
	HasDebounce                    bool
	// Raw are an edge's own spellings of a value the others cannot hold (a duration string
	// past time.Duration's range): CLI flags ("--delay=..."), or HTTP body fields
	// ("delay": "..."), used instead of the typed field.
	RawCLI  []string
	RawHTTP map[string]any
}

// Case is one hostile publish.
type Case struct {
	Name string
	Job  Job
	// Want are phrases the error message holds at every edge, compared case-insensitively.
	Want []string
	// Override replaces Want at one edge, whose own message says the same in its words
	// (flags are named as flags, body fields as fields).
	Override map[Edge][]string
	// HTTPCode is the error code of the HTTP answer (400); empty means "invalid_argument".
	HTTPCode string
	// Skip says why an edge cannot express the case.
	Skip map[Edge]string
}

// Wants returns the phrases the message must hold at edge e.
func (c Case) Wants(e Edge) []string {
	if w, ok := c.Override[e]; ok {
		return w
	}
	return c.Want
}

// SkipAt skips t when edge e cannot express the case.
func (c Case) SkipAt(t testing.TB, e Edge) { skipAt(t, c.Skip, e) }

// SkipAt skips t when edge e cannot express the extreme.
func (x Extreme) SkipAt(t testing.TB, e Edge) { skipAt(t, x.Skip, e) }

func skipAt(t testing.TB, skip map[Edge]string, e Edge) {
	t.Helper()
	if why, ok := skip[e]; ok {
		t.Skip(why)
	}
}

// Name is a hostile queue name or job id with the phrase its refusal must hold.
type Name struct {
	Name  string // the test's name
	Value string
	Want  string
}

// badNames are hostile for queue names and job ids alike.
var badNames = []Name{
	{"Empty", "", "empty"},
	{"OpenBrace", "a{b", `'{'`},
	{"CloseBrace", "a}b", `'}'`},
	{"HashTag", "{a}", `'{'`},
	{"Hash", "a#0", `'#'`},
	{"Space", "a b", `' '`},
	{"Tab", "a\tb", `'\t'`},
	{"Newline", "a\nb", `'\n'`},
	{"NUL", "a\x00b", `'\x00'`},
	{"DEL", "a\x7fb", `'\x7f'`},
	{"Escape", "a\x1b[31mb", `'\x1b'`},
	{"InvalidUTF8", "a\xff\xfeb", "not UTF-8"},
	{"NonASCII", "caf\u00e9", `'é'`},
	{"Slash", "a/b", `'/'`},
	{"Star", "a*", `'*'`},
	{"TooLong", strings.Repeat("q", MaxNameLen+1), "longer than 128 bytes"},
}

// BadQueues are names no queue may have. ':' would break the key layout and '#' names a
// partition ("q#0"), which only Conveyor makes.
func BadQueues() []Name {
	return append(append([]Name(nil), badNames...), Name{"Colon", "a:b", `':'`})
}

// BadIDs are ids no job may have (':' is allowed in ids: "order:42").
func BadIDs() []Name { return append([]Name(nil), badNames...) }

// Valid returns a valid job on queue: every Case changes one thing of it.
func Valid(queue string) Job {
	return Job{Queue: queue, Type: "echo", Payload: `{"n":1}`}
}

// Limits the cases are built around; the library's constants must agree (its test checks).
const (
	MaxMetadataEntries = 64
	MaxMetadataBytes   = 8 << 10
	MaxMaxRetries      = 1000
)

// MaxRunAt mirrors the latest due time pipeline.WithRunAt takes (internal/keys.MaxRunAt).
var MaxRunAt = time.Date(9999, 12, 31, 23, 59, 59, 999_000_000, time.UTC)

// Cases returns the hostile publishes, each a change of Valid(queue).
func Cases(queue string) []Case {
	var cs []Case
	add := func(c Case, edit func(*Job)) {
		c.Job = Valid(queue)
		edit(&c.Job)
		cs = append(cs, c)
	}
	for _, n := range BadQueues() {
		c := Case{Name: "Queue/" + n.Name, Want: []string{"queue name", n.Want}}
		switch n.Name {
		case "Empty":
			c.Skip = map[Edge]string{HTTP: "an empty path segment is another route (404)"}
		case "Slash":
			c.Skip = map[Edge]string{HTTP: "a '/' is a path separator (%2F is tested by the route test)"}
		}
		add(c, func(j *Job) { j.Queue = n.Value })
	}
	for _, n := range BadIDs() {
		if n.Name == "Empty" {
			continue // an empty id means "generate one"
		}
		c := Case{Name: "ID/" + n.Name, Want: []string{"job id", n.Want}}
		if n.Name == "InvalidUTF8" {
			c.Override = map[Edge][]string{HTTP: {"UTF-8"}}
			c.HTTPCode = "invalid_body" // JSON is UTF-8: the body itself is refused
		}
		add(c, func(j *Job) { j.ID = n.Value })
	}

	// Job types: the handler's name, printed in logs and status lines.
	for _, tc := range []struct{ name, typ, want string }{
		{"Empty", "", "type"},
		{"Space", "a b", "space or control character"},
		{"NBSP", "a\u00a0b", "space or control character"},
		{"Newline", "a\nb", "space or control character"},
		{"NUL", "a\x00b", "space or control character"},
		{"NEL", "a\u0085b", "space or control character"}, // a C1 control
		{"LineSeparator", "a\u2028b", "space or control character"},
		{"InvalidUTF8", "a\xffb", "UTF-8"},
		{"TooLong", strings.Repeat("t", MaxNameLen+1), "longer than 128 bytes"},
	} {
		c := Case{Name: "Type/" + tc.name, Want: []string{tc.want}}
		if tc.name == "InvalidUTF8" {
			c.HTTPCode = "invalid_body"
		}
		add(c, func(j *Job) { j.Type = tc.typ })
	}

	// Metadata: the limits, and keys and values that would not survive JSON or the logs.
	many := map[string]string{}
	for i := range MaxMetadataEntries + 1 {
		many[fmt.Sprintf("k%03d", i)] = "v"
	}
	metaCases := []struct {
		name string
		md   map[string]string
		want []string
		cli  []string // the CLI's own message, when it refuses the pair itself
		http string   // the HTTP code, when not invalid_argument
	}{
		{"TooMany", many, []string{"metadata", "65 entries", "64"}, nil, ""},
		{"TooBig", map[string]string{"k": strings.Repeat("v", MaxMetadataBytes)}, []string{"metadata", "8193 bytes", "8192"}, nil, ""},
		{"EmptyKey", map[string]string{"": "v"}, []string{"metadata key"}, []string{"--meta", "want key=value"}, ""},
		{"ReservedKey", map[string]string{"_x": "v"}, []string{"metadata key", "reserved"}, nil, ""},
		{"ControlInKey", map[string]string{"a\nb": "v"}, []string{"metadata key", "control character"}, nil, ""},
		{"InvalidUTF8Key", map[string]string{"a\xff": "v"}, []string{"metadata key", "UTF-8"}, nil, "invalid_body"},
		{"InvalidUTF8Value", map[string]string{"k": "a\xff"}, []string{"metadata", "UTF-8"}, nil, "invalid_body"},
	}
	for _, mc := range metaCases {
		c := Case{Name: "Metadata/" + mc.name, Want: mc.want, HTTPCode: mc.http}
		if mc.cli != nil {
			c.Override = map[Edge][]string{CLI: mc.cli}
		}
		if mc.http == "invalid_body" {
			c.Override = map[Edge][]string{HTTP: {"UTF-8"}}
		}
		add(c, func(j *Job) { j.Metadata = mc.md })
	}

	// Times.
	add(Case{Name: "Delay/Negative", Want: []string{"delay", "negative"}}, func(j *Job) { j.Delay = -time.Second })
	add(Case{Name: "Delay/PastDurationRange", Want: []string{"delay"},
		Override: map[Edge][]string{CLI: {"--delay", "invalid argument"}, HTTP: {"delay", "not a duration"}},
		Skip:     map[Edge]string{Library: "a time.Duration holds at most 292 years"}},
		func(j *Job) {
			j.RawCLI = []string{"--delay=3000000h"}
			j.RawHTTP = map[string]any{"delay": "3000000h"}
		})
	add(Case{Name: "RunAt/Year10000", Want: []string{"after 9999-12-31"},
		Skip: map[Edge]string{CLI: "publish has no --run-at"}},
		func(j *Job) { j.RunAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) })
	add(Case{Name: "RunAt/FarFuture", Want: []string{"after 9999-12-31"},
		Skip: map[Edge]string{CLI: "publish has no --run-at"}},
		func(j *Job) { j.RunAt = time.UnixMilli(1 << 62) })
	add(Case{Name: "RunAt/JustPastMax", Want: []string{"after 9999-12-31"},
		Skip: map[Edge]string{CLI: "publish has no --run-at"}},
		func(j *Job) { j.RunAt = MaxRunAt.Add(time.Millisecond) })

	// Retries.
	add(Case{Name: "Retries/Negative", Want: []string{"retries"}}, func(j *Job) { j.MaxRetries, j.HasRetries = -1, true })
	add(Case{Name: "Retries/OverMax", Want: []string{"retries", "1001", "1000"}}, func(j *Job) { j.MaxRetries, j.HasRetries = MaxMaxRetries+1, true })
	add(Case{Name: "Retries/Huge", Want: []string{"retries", "1000"}}, func(j *Job) { j.MaxRetries, j.HasRetries = 1<<40, true })
	add(Case{Name: "Retries/PastIntRange", Want: []string{"retries"},
		Override: map[Edge][]string{CLI: {"--max-retries", "invalid argument"}, HTTP: {"max_retries", "integer"}},
		HTTPCode: "invalid_body",
		Skip:     map[Edge]string{Library: "an int cannot hold it"}},
		func(j *Job) {
			j.RawCLI = []string{"--max-retries=99999999999999999999"}
			j.RawHTTP = map[string]any{"max_retries": 1e20}
		})

	// Timeouts.
	add(Case{Name: "Timeout/Negative", Want: []string{"timeout", "negative"}}, func(j *Job) { j.Timeout = -time.Second })
	add(Case{Name: "Timeout/PastDurationRange", Want: []string{"timeout"},
		Override: map[Edge][]string{CLI: {"--timeout", "invalid argument"}, HTTP: {"timeout", "not a duration"}},
		Skip:     map[Edge]string{Library: "a time.Duration holds at most 292 years"}},
		func(j *Job) {
			j.RawCLI = []string{"--timeout=3000000h"}
			j.RawHTTP = map[string]any{"timeout": "3000000h"}
		})

	// Unique keys: a name inside a Redis key, and a TTL.
	add(Case{Name: "Unique/ZeroTTL", Want: []string{"unique", "ttl", "positive"}},
		func(j *Job) { j.UniqueKey, j.UniqueTTL = "k", 0; j.HasUnique = true })
	add(Case{Name: "Unique/NegativeTTL", Want: []string{"unique", "ttl", "positive"}},
		func(j *Job) { j.UniqueKey, j.UniqueTTL = "k", -time.Second; j.HasUnique = true })
	add(Case{Name: "Unique/EmptyKey", Want: []string{"unique", "key"},
		Override: map[Edge][]string{CLI: {"--unique-ttl needs --unique"}}},
		func(j *Job) { j.UniqueTTL, j.HasUnique = time.Minute, true })
	add(Case{Name: "Unique/KeyTooLong", Want: []string{"unique key", "128"}},
		func(j *Job) { j.UniqueKey, j.UniqueTTL = strings.Repeat("u", MaxNameLen+1), time.Minute })
	add(Case{Name: "Unique/ControlInKey", Want: []string{"unique key", "control character"}},
		func(j *Job) { j.UniqueKey, j.UniqueTTL = "a\x00b", time.Minute })
	add(Case{Name: "Unique/InvalidUTF8Key", Want: []string{"unique key", "UTF-8"},
		Override: map[Edge][]string{HTTP: {"UTF-8"}}, HTTPCode: "invalid_body"},
		func(j *Job) { j.UniqueKey, j.UniqueTTL = "a\xffb", time.Minute })

	// Debounce: a name inside a Redis key, two durations, and options it excludes.
	debounce := func(j *Job) { j.DebounceKey, j.DebounceQuiet, j.DebounceMaxWait = "k", time.Second, time.Minute }
	add(Case{Name: "Debounce/EmptyKey", Want: []string{"debounce", "key"}},
		func(j *Job) { debounce(j); j.DebounceKey, j.HasDebounce = "", true })
	add(Case{Name: "Debounce/KeyTooLong", Want: []string{"debounce key", "128"}},
		func(j *Job) { debounce(j); j.DebounceKey = strings.Repeat("d", MaxNameLen+1) })
	add(Case{Name: "Debounce/ControlInKey", Want: []string{"debounce key", "control character"}},
		func(j *Job) { debounce(j); j.DebounceKey = "a\x00b" })
	add(Case{Name: "Debounce/ZeroQuiet", Want: []string{"debounce", "quiet"}},
		func(j *Job) { debounce(j); j.DebounceQuiet = 0 })
	add(Case{Name: "Debounce/NegativeQuiet", Want: []string{"debounce", "quiet"}},
		func(j *Job) { debounce(j); j.DebounceQuiet = -time.Second })
	add(Case{Name: "Debounce/MaxWaitBelowQuiet", Want: []string{"debounce", "max wait"}},
		func(j *Job) { debounce(j); j.DebounceQuiet, j.DebounceMaxWait = time.Minute, time.Second })
	add(Case{Name: "Debounce/WithID", Want: []string{"debounce", "id"}},
		func(j *Job) { debounce(j); j.ID = "job-1" })
	add(Case{Name: "Debounce/WithDelay", Want: []string{"debounce", "delay"}},
		func(j *Job) { debounce(j); j.Delay = time.Minute })
	add(Case{Name: "Debounce/WithUnique", Want: []string{"debounce", "unique"}},
		func(j *Job) { debounce(j); j.UniqueKey, j.UniqueTTL = "u", time.Minute })
	return cs
}

// Extreme is a valid job at a limit, which every edge must accept.
type Extreme struct {
	Name string
	Job  Job
	Skip map[Edge]string
}

// Extremes returns valid jobs at the limits, each a change of Valid(queue) (a queue name at the
// limit replaces queue).
func Extremes(queue string) []Extreme {
	var es []Extreme
	add := func(name string, skip map[Edge]string, edit func(*Job)) {
		j := Valid(queue)
		edit(&j)
		es = append(es, Extreme{Name: name, Job: j, Skip: skip})
	}
	full := map[string]string{}
	for i := range MaxMetadataEntries {
		full[fmt.Sprintf("k%03d", i)] = "v"
	}
	add("QueueAtMaxLen", nil, func(j *Job) { j.Queue = strings.Repeat("q", MaxNameLen-len(queue)) + queue })
	add("IDAtMaxLenWithColons", nil, func(j *Job) { j.ID = "order:" + strings.Repeat("9", MaxNameLen-6) })
	add("TypeAtMaxLen", nil, func(j *Job) { j.Type = strings.Repeat("t", MaxNameLen) })
	add("TypeNonASCII", nil, func(j *Job) { j.Type = "résumé.send/v2" })
	add("MetadataMaxEntries", nil, func(j *Job) { j.Metadata = full })
	add("MetadataMaxBytes", nil, func(j *Job) {
		j.Metadata = map[string]string{"k": strings.Repeat("v", MaxMetadataBytes-1)}
	})
	add("MetadataUnicodeAndControlInValue", nil, func(j *Job) {
		j.Metadata = map[string]string{"trace": "naïve\tline\n"}
	})
	add("RetriesZero", nil, func(j *Job) { j.MaxRetries, j.HasRetries = 0, true })
	add("RetriesMax", nil, func(j *Job) { j.MaxRetries, j.HasRetries = MaxMaxRetries, true })
	add("RunAtMax", map[Edge]string{CLI: "publish has no --run-at"}, func(j *Job) { j.RunAt = MaxRunAt })
	add("DelayMaxDuration", nil, func(j *Job) { j.Delay = time.Duration(1<<63 - 1) })
	add("TimeoutMaxDuration", nil, func(j *Job) { j.Timeout = time.Duration(1<<63 - 1) })
	add("TimeoutSubMillisecond", nil, func(j *Job) { j.Timeout = 300 * time.Microsecond })
	add("UniqueMaxTTL", nil, func(j *Job) { j.UniqueKey, j.UniqueTTL = "user@example.com {x}:#1", time.Duration(1<<63-1) })
	add("UniqueKeyAtMaxLen", nil, func(j *Job) { j.UniqueKey, j.UniqueTTL = strings.Repeat("u", MaxNameLen), time.Minute })
	add("DebounceKeyAtMaxLen", nil, func(j *Job) {
		j.DebounceKey, j.DebounceQuiet, j.DebounceMaxWait = "user@example.com {x}:#"+strings.Repeat("d", MaxNameLen-22), time.Millisecond, time.Millisecond
	})
	return es
}

// CLIArgs spells j as a `conveyor publish` command line (without the global flags).
func (j Job) CLIArgs() []string {
	args := []string{"publish", "--queue", j.Queue, "--type", j.Type}
	if j.Payload != "" {
		args = append(args, "--payload", j.Payload)
	}
	if j.ID != "" {
		args = append(args, "--id", j.ID)
	}
	keys := make([]string, 0, len(j.Metadata))
	for k := range j.Metadata {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		args = append(args, "--meta", k+"="+j.Metadata[k])
	}
	if j.Delay != 0 {
		args = append(args, "--delay", j.Delay.String())
	}
	if j.HasRetries {
		args = append(args, "--max-retries", strconv.Itoa(j.MaxRetries))
	}
	if j.Timeout != 0 {
		args = append(args, "--timeout", j.Timeout.String())
	}
	if j.UniqueKey != "" {
		args = append(args, "--unique", j.UniqueKey)
	}
	if j.UniqueKey != "" || j.HasUnique {
		args = append(args, "--unique-ttl", j.UniqueTTL.String())
	}
	if j.DebounceKey != "" {
		args = append(args, "--debounce", j.DebounceKey)
	}
	if j.DebounceKey != "" || j.HasDebounce {
		args = append(args, "--debounce-quiet", j.DebounceQuiet.String(), "--debounce-max-wait", j.DebounceMaxWait.String())
	}
	return append(args, j.RawCLI...)
}

// HTTPBody spells j as the JSON body of POST /v1/queues/{queue}/jobs. Strings are written byte
// for byte, so invalid UTF-8 reaches the server as a hostile client sends it (encoding/json
// would replace it).
func (j Job) HTTPBody() string {
	var b strings.Builder
	b.WriteString(`{"type":` + JSONString(j.Type))
	if j.Payload != "" {
		b.WriteString(`,"payload":` + j.Payload)
	}
	if j.ID != "" {
		b.WriteString(`,"id":` + JSONString(j.ID))
	}
	if j.Metadata != nil {
		b.WriteString(`,"metadata":{`)
		keys := make([]string, 0, len(j.Metadata))
		for k := range j.Metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(JSONString(k) + ":" + JSONString(j.Metadata[k]))
		}
		b.WriteByte('}')
	}
	if j.Delay != 0 {
		b.WriteString(`,"delay":` + JSONString(j.Delay.String()))
	}
	if !j.RunAt.IsZero() {
		b.WriteString(`,"run_at":` + strconv.FormatInt(j.RunAt.UnixMilli(), 10))
	}
	if j.HasRetries {
		b.WriteString(`,"max_retries":` + strconv.Itoa(j.MaxRetries))
	}
	if j.Timeout != 0 {
		b.WriteString(`,"timeout":` + JSONString(j.Timeout.String()))
	}
	if j.UniqueKey != "" || j.HasUnique {
		b.WriteString(`,"unique":{"key":` + JSONString(j.UniqueKey) + `,"ttl":` + JSONString(j.UniqueTTL.String()) + `}`)
	}
	if j.DebounceKey != "" || j.HasDebounce {
		b.WriteString(`,"debounce":{"key":` + JSONString(j.DebounceKey) + `,"quiet":` + JSONString(j.DebounceQuiet.String()) +
			`,"max_wait":` + JSONString(j.DebounceMaxWait.String()) + `}`)
	}
	raw := make([]string, 0, len(j.RawHTTP))
	for k := range j.RawHTTP {
		raw = append(raw, k)
	}
	slices.Sort(raw)
	for _, k := range raw {
		v, _ := json.Marshal(j.RawHTTP[k])
		b.WriteString("," + JSONString(k) + ":" + string(v))
	}
	b.WriteByte('}')
	return b.String()
}

// JSONString quotes s as a JSON string, escaping quotes, backslashes and control characters
// and copying every other byte as it is, invalid UTF-8 included.
func JSONString(s string) string {
	b := []byte{'"'}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, fmt.Sprintf(`\u%04x`, c)...)
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}
