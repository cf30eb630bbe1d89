package keys

import (
	"strings"
	"testing"
)

func TestEntryJobRoundTrip(t *testing.T) {
	t.Parallel()
	cases := []struct {
		attempt, retries int
		timeout          int64
		typ              string
	}{{1, 0, 0, "echo"}, {3, 5, 1500, "email:send"}, {1000, 1000, 86400000, "a.b/c-d_e"}}
	for _, tc := range cases {
		a, r, to, typ, ok := ParseEntryJob(FormatEntryJob(tc.attempt, tc.retries, tc.timeout, tc.typ))
		if !ok || a != tc.attempt || r != tc.retries || to != tc.timeout || typ != tc.typ {
			t.Fatalf("round trip of %+v gave %d %d %d %q %v", tc, a, r, to, typ, ok)
		}
	}
	for _, bad := range []string{"", "1 2 3", "1 2 3 ", "0 1 1 t", "-1 1 1 t", "1 -1 1 t", "1 1 -1 t", "a 1 1 t", "1  1 1 t", "99999999999 1 1 t", "+1 1 1 t", "1 1 1234567890123456 t"} {
		if _, _, _, _, ok := ParseEntryJob(bad); ok {
			t.Fatalf("ParseEntryJob(%q) accepted", bad)
		}
	}
}

func FuzzParseEntryJob(f *testing.F) {
	f.Add("1 5 0 echo")
	f.Fuzz(func(t *testing.T, s string) {
		a, r, to, typ, ok := ParseEntryJob(s)
		if !ok {
			return
		}
		// Leading zeros parse but do not format back; the values must survive a round trip.
		if a2, r2, to2, typ2, ok2 := ParseEntryJob(FormatEntryJob(a, r, to, typ)); !ok2 || a2 != a || r2 != r || to2 != to || typ2 != typ {
			t.Fatalf("%q: unstable", s)
		}
	})
}

func TestValidateNames(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"default", "a.b-c_d", "Q1"} {
		if err := ValidateQueue(ok); err != nil {
			t.Fatalf("ValidateQueue(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a b", "a{b}", "a:b", "a#0", string(make([]byte, MaxNameLen+1))} {
		if ValidateQueue(bad) == nil {
			t.Fatalf("ValidateQueue(%q) accepted", bad)
		}
	}
	if err := ValidateID("order:42"); err != nil {
		t.Fatal(err)
	}
	if ValidID("a b") || ValidID("") {
		t.Fatal("ValidID accepted a bad id")
	}
	q := New("conveyor", "emails")
	if q.Stream() != "conveyor:{emails}:stream" || q.Job("x") != "conveyor:{emails}:job:x" {
		t.Fatalf("key layout changed: %s %s", q.Stream(), q.Job("x"))
	}
}

// Errors name the offending character as the user typed it: 'ü', not the first byte of its
// UTF-8 encoding ('Ã'), and a byte that is not UTF-8 as \xNN.
func TestValidateNamesQuotesCharacters(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, want string }{
		{"grüße", `character 'ü' not allowed`},
		{"a b", `character ' ' not allowed`},
		{"tab\there", `character '\t' not allowed`},
		{"bad\xffbyte", `byte '\xff' (not UTF-8) not allowed`},
		{"smile😀", `character '😀' not allowed`},
	}
	for _, tc := range cases {
		err := ValidateQueue(tc.name)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ValidateQueue(%q) = %v, want it to say %s", tc.name, err, tc.want)
		}
	}
}

func TestPartitions(t *testing.T) {
	t.Parallel()
	if got := PartitionName("emails", 0, 1); got != "emails" {
		t.Fatalf("one partition: %q, want the plain name", got)
	}
	q := New("cv", PartitionName("emails", 2, 3))
	if q.Name() != "emails" || q.Tag() != "emails#2" || q.Partition() != 2 || q.Stream() != "cv:{emails#2}:stream" {
		t.Fatalf("partition keys: name %q tag %q part %d stream %q", q.Name(), q.Tag(), q.Partition(), q.Stream())
	}
	plain := New("cv", "emails")
	if plain.Name() != "emails" || plain.Partition() != 0 || plain.Stream() != "cv:{emails}:stream" {
		t.Fatalf("plain keys changed: %q %d %q", plain.Name(), plain.Partition(), plain.Stream())
	}
	// FNV-1a 32 of "a" is 0xe40c292c: the routing must never change between versions.
	if got, want := PartitionOf("a", 1000), int(uint32(0xe40c292c)%1000); got != want {
		t.Fatalf("PartitionOf(a) = %d, want %d", got, want)
	}
	seen := map[int]bool{}
	for i := range 100 {
		seen[PartitionOf(strings.Repeat("x", i), 3)] = true
	}
	if len(seen) != 3 {
		t.Fatalf("100 keys over 3 partitions reached %d of them", len(seen))
	}
	for _, ok := range []string{"q", "q#0", "q#1023"} {
		if err := ValidatePartition(ok); err != nil {
			t.Errorf("ValidatePartition(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "#1", "q#", "q#01", "q#1024", "q#-1", "q#a", "q#1#2", "q{#1"} {
		if ValidatePartition(bad) == nil {
			t.Errorf("ValidatePartition(%q) accepted", bad)
		}
	}
}
