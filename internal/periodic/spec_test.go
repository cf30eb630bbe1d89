package periodic

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParseNext(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		spec, from, want string
	}{
		{"@every 1s", "2026-01-01T00:00:00.4Z", "2026-01-01T00:00:01Z"},
		{"@every 1s", "2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z"},
		// Epoch-aligned, whatever the time asked from.
		{"@every 1m", "2026-01-01T00:00:59Z", "2026-01-01T00:01:00Z"},
		{"@every 1m", "2026-01-01T00:00:00.5Z", "2026-01-01T00:01:00Z"},
		{"@every 7s", "1969-12-31T23:59:55Z", "1970-01-01T00:00:00Z"},
		{"*/5 * * * * *", "2026-01-01T00:00:01Z", "2026-01-01T00:00:05Z"},
		{"0 9 * * *", "2026-01-01T10:00:00Z", "2026-01-02T09:00:00Z"},
		{"CRON_TZ=Europe/Berlin 0 9 * * *", "2026-01-01T00:00:00Z", "2026-01-01T08:00:00Z"},
		{"TZ=America/New_York 0 0 9 * * *", "2026-07-01T00:00:00Z", "2026-07-01T13:00:00Z"},
		{"@hourly", "2026-01-01T00:30:00Z", "2026-01-01T01:00:00Z"},
		{"0 0 30 2 *", "2026-01-01T00:00:00Z", "0001-01-01T00:00:00Z"},
	}
	for _, tc := range cases {
		s, err := Parse(tc.spec)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.spec, err)
		}
		got := s.Next(at(tc.from))
		if want := at(tc.want); !got.Equal(want) && !(want.Year() == 1 && got.IsZero()) {
			t.Errorf("%q after %s: %s, want %s", tc.spec, tc.from, got, want)
		}
	}
	for _, bad := range []string{"", "@every", "@every 0s", "@every 1500ms", "@every -1s", "@every x", "* * *",
		"61 * * * *", "CRON_TZ=Nowhere/Land * * * * *", "@yearlyish", "TZ=", "CRON_TZ=UTC @every 1s"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

// An error names the spec as it was typed, not the CRON_TZ=UTC that Parse reads it with.
func TestParseErrorNamesTheSpecAsTyped(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"61 * * * *", "* * *", "@yearlyish", "  0 0 30 2 * * * "} {
		_, err := Parse(spec)
		if err == nil {
			t.Fatalf("Parse(%q) accepted", spec)
		}
		if strings.Contains(err.Error(), "CRON_TZ") {
			t.Errorf("Parse(%q): %q names a CRON_TZ the spec has not", spec, err)
		}
		if want := fmt.Sprintf("%q", strings.TrimSpace(spec)); !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %q does not name %s", spec, err, want)
		}
	}
	_, err := Parse("CRON_TZ=Nowhere/Land * * * * *")
	if err == nil || !strings.Contains(err.Error(), `"CRON_TZ=Nowhere/Land * * * * *"`) {
		t.Errorf("a spec with its own zone: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"@every 1s", "*/5 * * * * *", "CRON_TZ=Europe/Berlin 0 9 * * 1-5", "@daily", "0 0 30 2 *"} {
		f.Add(s)
	}
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := Parse(spec)
		if err != nil {
			return
		}
		// A parsed spec's ticks are whole seconds, in order.
		a := s.Next(from)
		if a.IsZero() {
			return
		}
		b := s.Next(a)
		if a.Nanosecond() != 0 || !a.After(from) || (!b.IsZero() && !b.After(a)) {
			t.Fatalf("%q: ticks %s then %s after %s", spec, a, b, from)
		}
	})
}
