package control

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/metakey"
)

// kv builds control keys from pairs.
func kv(pairs ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i < len(pairs); i += 2 {
		m[pairs[i]] = pairs[i+1]
	}
	return m
}

// Every control key sets its value; what is not given keeps its zero and its flag false.
func TestRead(t *testing.T) {
	t.Parallel()
	v, err := Read(kv(metakey.Type, "report", metakey.RunAt, "1800000000000", metakey.MaxRetries, "0",
		metakey.Timeout, "0s", metakey.UniqueKey, "k k", metakey.Priority, "4", metakey.Group, "g",
		metakey.LimitKey, "acct", metakey.Retention, "0s"), "default")
	require.NoError(t, err)
	require.Equal(t, Values{
		Type: "report", RunAt: time.UnixMilli(1800000000000), HasRunAt: true,
		MaxRetries: 0, HasMaxRetries: true, Timeout: 0, HasTimeout: true, UniqueKey: "k k",
		Priority: 4, Group: "g", LimitKey: "acct", Retention: 0, HasRetention: true,
	}, v)

	v, err = Read(kv(metakey.Delay, "90s", metakey.UniqueKey, "u", metakey.UniqueTTL, "2h"), "default")
	require.NoError(t, err)
	require.Equal(t, Values{Type: "default", Delay: 90 * time.Second, HasDelay: true, UniqueKey: "u", UniqueTTL: 2 * time.Hour}, v)

	v, err = Read(kv(metakey.DebounceKey, "doc", metakey.DebounceQuiet, "2s", metakey.DebounceMaxWait, "1m"), "t")
	require.NoError(t, err)
	require.Equal(t, Values{Type: "t", DebounceKey: "doc", DebounceQuiet: 2 * time.Second, DebounceMaxWait: time.Minute}, v)

	v, err = Read(nil, "t")
	require.NoError(t, err)
	require.Equal(t, Values{Type: "t"}, v)
}

// The errors are plain (pipeline adds ErrInvalid's words) and their texts are what the
// Publisher's errors and the dead set's reasons have always said: the key first, then why.
func TestReadErrors(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", keys.MaxNameLen+1)
	deb := func(pairs ...string) map[string]string {
		return kv(append([]string{metakey.DebounceKey, "k", metakey.DebounceQuiet, "1s", metakey.DebounceMaxWait, "1m"}, pairs...)...)
	}
	cases := []struct {
		ctrl map[string]string
		dflt string
		want string
	}{
		{nil, "", "no job type: the message has no conveyor_type and the publisher no DefaultType"},
		{kv(metakey.Delay, "10"), "t", `conveyor_delay "10": not a Go duration (such as 90s or 1h30m)`},
		{kv(metakey.Delay, "-1s"), "t", `conveyor_delay "-1s": negative`},
		{kv(metakey.Delay, "1s", metakey.RunAt, "0"), "t", "conveyor_delay and conveyor_run_at together"},
		{kv(metakey.RunAt, "tomorrow"), "t", `conveyor_run_at "tomorrow": neither unix milliseconds nor an RFC 3339 time`},
		{kv(metakey.RunAt, "99999999999999999999"), "t", `conveyor_run_at "99999999999999999999": unix milliseconds out of range`},
		{kv(metakey.RunAt, "253402300800000"), "t", `conveyor_run_at "253402300800000": after 9999-12-31T23:59:59Z`},
		{kv(metakey.MaxRetries, "three"), "t", `conveyor_max_retries "three": not an integer`},
		{kv(metakey.MaxRetries, "1001"), "t", `conveyor_max_retries "1001": outside 0..1000`},
		{kv(metakey.Timeout, "-1m"), "t", `conveyor_timeout "-1m": negative`},
		{kv(metakey.UniqueTTL, "1m"), "t", "conveyor_unique_ttl without conveyor_unique_key"},
		{kv(metakey.UniqueKey, long), "t", `conveyor_unique_key "` + long + `": must be 1 to 128 bytes`},
		{kv(metakey.UniqueKey, "a\nb"), "t", `conveyor_unique_key: unique key "a\nb" has a control character`},
		{kv(metakey.UniqueKey, "k", metakey.UniqueTTL, "0s"), "t", `conveyor_unique_ttl "0s": must be positive`},
		{kv(metakey.Priority, "5"), "t", `conveyor_priority "5": outside 1 (first) to 4`},
		{kv(metakey.Priority, "high"), "t", `conveyor_priority "high": not an integer`},
		{kv(metakey.Group, "a b"), "t", `conveyor_group: invalid group "a b": character ' ' not allowed`},
		{kv(metakey.LimitKey, ""), "t", "conveyor_limit_key: limit key must be 1 to 128 bytes"},
		{kv(metakey.Retention, "forever"), "t", `conveyor_retention "forever": not a Go duration (such as 90s or 1h30m)`},
		{kv(metakey.DebounceKey, "k"), "t", `conveyor_debounce_key needs conveyor_debounce_quiet and conveyor_debounce_max_wait (say "2s" and "1m")`},
		{kv(metakey.DebounceQuiet, "1s", metakey.DebounceMaxWait, "1m"), "t", "conveyor_debounce_quiet and conveyor_debounce_max_wait need conveyor_debounce_key"},
		{deb(metakey.DebounceKey, ""), "t", "conveyor_debounce_key: debounce key must be 1 to 128 bytes"},
		{deb(metakey.Group, "g"), "t", "conveyor_debounce_key cannot be combined with conveyor_group (as WithDebounce)"},
		{deb(metakey.DebounceQuiet, "0s"), "t", `conveyor_debounce_quiet "0s": outside (0, 8760h0m0s]`},
		{deb(metakey.DebounceMaxWait, "1ms"), "t", `conveyor_debounce_max_wait "1ms": outside [conveyor_debounce_quiet 1s, 8760h0m0s]`},
	}
	for _, c := range cases {
		_, err := Read(c.ctrl, c.dflt)
		require.EqualError(t, err, c.want, "%v", c.ctrl)
		require.False(t, errors.As(err, new(*TypeError)), "%v", c.ctrl)
	}
}

// A bad type is a TypeError: pipeline wraps its inner error, the Client's own for a type.
func TestReadTypeError(t *testing.T) {
	t.Parallel()
	for typ, want := range map[string]string{"": "empty job type", "a b": `job type "a b" has a space or control character`} {
		_, err := Read(kv(metakey.Type, typ), "default")
		te, ok := errors.AsType[*TypeError](err)
		require.True(t, ok, "%q: %v", typ, err)
		require.EqualError(t, te.Err, want)
		require.EqualError(t, err, "conveyor_type: "+want)
	}
}

func TestParseRunAt(t *testing.T) {
	t.Parallel()
	at, err := parseRunAt("1800000000000")
	require.NoError(t, err)
	require.True(t, at.Equal(time.UnixMilli(1800000000000)))
	at, err = parseRunAt("2030-01-02T03:04:05+02:00")
	require.NoError(t, err)
	require.True(t, at.Equal(time.Date(2030, 1, 2, 1, 4, 5, 0, time.UTC)))
	for _, s := range []string{"", "-5", "1e9", "2030-01-02T03:04:05", "99999999999999999999"} {
		_, err := parseRunAt(s)
		require.Error(t, err, s)
	}
}

// Every constant of metakey that starts with its Prefix is a control key, and the Publisher's
// own are those a Worker's adoption cannot apply.
func TestKeys(t *testing.T) {
	t.Parallel()
	shared := []string{metakey.Type, metakey.Delay, metakey.RunAt, metakey.MaxRetries, metakey.Timeout,
		metakey.UniqueKey, metakey.UniqueTTL}
	own := []string{metakey.Priority, metakey.Group, metakey.LimitKey, metakey.Retention,
		metakey.DebounceKey, metakey.DebounceQuiet, metakey.DebounceMaxWait}
	for _, k := range shared {
		require.True(t, IsKey(k), k)
		require.False(t, PublisherOnly(k), k)
	}
	for _, k := range own {
		require.True(t, IsKey(k), k)
		require.True(t, PublisherOnly(k), k)
	}
	for _, k := range []string{metakey.Prefix, "conveyor_delays", metakey.EntryType, metakey.Schedule} {
		require.False(t, IsKey(k), k)
	}
	require.EqualError(t, UnknownKey("conveyor_delays"),
		`metadata key "conveyor_delays": unknown control key (keys starting with "conveyor_" are reserved for Conveyor's control keys)`)
}

// Adoptable keeps the control keys of another publisher's message and says why one cannot be
// adopted.
func TestAdoptable(t *testing.T) {
	t.Parallel()
	ctrl, reason := Adoptable(kv("tenant", "acme", metakey.Delay, "1h"), "echo")
	require.Empty(t, reason)
	require.Equal(t, kv(metakey.Delay, "1h"), ctrl)

	_, reason = Adoptable(kv(metakey.Group, "g"), "echo")
	require.Equal(t, "conveyor_group: set by Conveyor's Publisher only; a message of another publisher cannot carry it (its entry is written already)", reason)
	_, reason = Adoptable(kv("conveyor_delays", "1h"), "echo")
	require.Equal(t, UnknownKey("conveyor_delays").Error(), reason)
	_, reason = Adoptable(kv("tenant", "acme"), "")
	require.Equal(t, "a message of another publisher without conveyor_type metadata, and the worker has no DefaultType", reason)
	ctrl, reason = Adoptable(kv(metakey.Type, "echo"), "")
	require.Empty(t, reason)
	require.Equal(t, kv(metakey.Type, "echo"), ctrl)
}

// FuzzRead holds Read to its bounds: it never panics, a refusal names a control key, and what
// it accepts is within what the Client's options take.
func FuzzRead(f *testing.F) {
	f.Add("echo", "1h", "", "3", "1s", "k", "90s", "2", "g", "acct", "1h", "", "", "")
	f.Add("", "", "1800000000000", "", "", "", "", "", "", "", "", "doc", "2s", "1m")
	f.Add("a b", "-1s", "tomorrow", "x", "soon", "", "0s", "9", "a b", "\x00", "-1h", "d", "0s", "1ms")
	f.Fuzz(func(t *testing.T, typ, delay, runAt, retries, timeout, ukey, uttl, prio, group, limitKey, retention, dkey, dquiet, dmax string) {
		ctrl := map[string]string{}
		for k, s := range map[string]string{metakey.Type: typ, metakey.Delay: delay, metakey.RunAt: runAt,
			metakey.MaxRetries: retries, metakey.Timeout: timeout, metakey.UniqueKey: ukey, metakey.UniqueTTL: uttl,
			metakey.Priority: prio, metakey.Group: group, metakey.LimitKey: limitKey, metakey.Retention: retention,
			metakey.DebounceKey: dkey, metakey.DebounceQuiet: dquiet, metakey.DebounceMaxWait: dmax} {
			if s != "" {
				ctrl[k] = s
			}
		}
		v, err := Read(ctrl, "default")
		if err != nil {
			if !strings.Contains(err.Error(), metakey.Prefix) {
				t.Fatalf("refusal %q names no control key", err)
			}
			return
		}
		switch {
		case keys.ValidateType(v.Type) != nil:
			t.Fatalf("type %q", v.Type)
		case v.HasDelay && v.HasRunAt, v.Delay < 0, v.Timeout < 0, v.Retention < 0:
			t.Fatalf("due or durations: %+v", v)
		case v.HasRunAt && (v.RunAt.IsZero() && runAt != "0001-01-01T00:00:00Z" || v.RunAt.After(keys.MaxRunAt)):
			t.Fatalf("run at %v from %q", v.RunAt, runAt)
		case v.MaxRetries < 0 || v.MaxRetries > keys.MaxRetries:
			t.Fatalf("max retries %d", v.MaxRetries)
		case v.Priority != 0 && (v.Priority < keys.MinPriority || v.Priority > keys.MaxPriority):
			t.Fatalf("priority %d", v.Priority)
		case v.UniqueKey != ukey || v.UniqueTTL < 0 || v.UniqueKey == "" && v.UniqueTTL != 0:
			t.Fatalf("unique %q %v from %q", v.UniqueKey, v.UniqueTTL, ukey)
		case v.Group != "" && keys.ValidateGroup(v.Group) != nil, v.LimitKey != limitKey:
			t.Fatalf("group %q limit key %q", v.Group, v.LimitKey)
		case v.DebounceKey != "" && (v.DebounceQuiet <= 0 || v.DebounceMaxWait < v.DebounceQuiet ||
			v.DebounceMaxWait > keys.MaxDebounceWait || v.HasDelay || v.HasRunAt || v.UniqueKey != "" || v.Group != ""):
			t.Fatalf("debounce %+v", v)
		}
	})
}
