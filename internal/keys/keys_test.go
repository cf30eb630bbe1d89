package keys

import (
	"math"
	"sort"
	"strconv"
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
	if q.Name() != "emails" || q.Tag() != PartitionName("emails", 2, 3) || q.Partition() != 2 || !strings.HasPrefix(q.Stream(), "cv:{emails#2.") {
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
	for _, ok := range []string{"q", "q#0.AAA", "q#1023.a-_9", PartitionName("emails", 2, 3)} {
		if err := ValidatePartition(ok); err != nil {
			t.Errorf("ValidatePartition(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "#1", "q#", "q#0", "q#01.AAA", "q#1.AA", "q#1.", "q#.AAA", "q#1024.AAA", "q#-1.AAA", "q#1.AAAAAAAAA", "q#1.AA.A", "q#a.AAA", "q#1#2.AAA", "q{#1.AAA"} {
		if ValidatePartition(bad) == nil {
			t.Errorf("ValidatePartition(%q) accepted", bad)
		}
	}
}

// Slot is Redis Cluster's CRC16 slot: the values Redis's own CLUSTER KEYSLOT gives.
func TestSlot(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]int{
		"foo": 12182, "123456789": 12739, "{user1000}.following": 3443, "{user1000}.followers": 3443,
		"foo{}{bar}": Slot("foo{}{bar}"), "a": 15495, "b": 3300, "c": 7365, "{}x": Slot("{}x"),
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	// An empty tag hashes the whole key.
	if Slot("{}x") != int(crc16(0, "{}x"))%Slots {
		t.Error("an empty tag is not a tag")
	}
}

const pinnedEmails1of3 = "emails#1.HJE"

// defaultLayout is the first slot of each of m masters as redis-cli --cluster create assigns
// them (clusterManagerCommandCreate): equal runs, the cursor rounded.
func defaultLayout(m int) []int {
	per := float32(Slots) / float32(m)
	firsts := make([]int, m)
	first, cursor := 0, float32(0)
	for i := range m {
		firsts[i] = first
		last := int(math.Round(float64(cursor + per - 1)))
		if last > Slots-1 || i == m-1 {
			last = Slots - 1
		}
		first = max(last, first) + 1
		cursor += per
	}
	return firsts
}

// TestPartitionSlotsSpread: the P partitions' slots fall in their own P-th of the slots, the
// names are deterministic, and under the default layout of M masters every master holds a
// partition when P >= M, P/M of them when M divides P.
func TestPartitionSlotsSpread(t *testing.T) {
	t.Parallel()
	names := []string{"a", "q", "hot", "emails", "default", "orders.eu-west_1", strings.Repeat("z", MaxNameLen)}
	for k := range 100 {
		names = append(names, "queue-"+strconv.Itoa(k))
	}
	for _, name := range names {
		for p := 1; p <= 16; p++ {
			slots := make([]int, p)
			for i := range p {
				tag := PartitionName(name, i, p)
				if p == 1 {
					if tag != name {
						t.Fatalf("one partition of %s is %q, want the plain name", name, tag)
					}
					continue
				}
				if err := ValidatePartition(tag); err != nil {
					t.Fatalf("PartitionName(%s, %d, %d) = %q: %v", name, i, p, tag, err)
				}
				if again := spreadTag(name, i, p); again != tag {
					t.Fatalf("partition %d of %d of %s: %q, then %q", i, p, name, tag, again)
				}
				slots[i] = Slot("x:{" + tag + "}:stream")
				if slots[i] != slotMid(i, p) {
					t.Fatalf("partition %d of %d of %s (%s) is in slot %d, not the middle of its share %d", i, p, name, tag, slots[i], slotMid(i, p))
				}
				if lo, hi := i*Slots/p, (i+1)*Slots/p; slots[i] < lo || slots[i] >= hi {
					t.Fatalf("partition %d of %d of %s (%s) is in slot %d, outside %d..%d", i, p, name, tag, slots[i], lo, hi-1)
				}
				if q := New("x", tag); q.Name() != name || q.Partition() != i {
					t.Fatalf("New(%q): name %q partition %d", tag, q.Name(), q.Partition())
				}
			}
			for m := 1; m <= min(p, 16); m++ {
				firsts := defaultLayout(m)
				held := make([]int, m)
				for _, slot := range slots {
					j := sort.SearchInts(firsts, slot+1) - 1
					held[j]++
				}
				for j, n := range held {
					if n == 0 || (p%m == 0 && n != p/m) {
						t.Fatalf("%s with %d partitions over %d masters: master %d holds %d (all: %v, slots %v)", name, p, m, j, n, held, slots)
					}
				}
			}
		}
	}
	// The names of every count up to MaxPartitions exist and are found quickly enough to
	// compute once per queue (memoized).
	for i := range MaxPartitions {
		tag := PartitionName("big", i, MaxPartitions)
		if Slot(tag) != slotMid(i, MaxPartitions) || ValidatePartition(tag) != nil {
			t.Fatalf("partition %d of %d: %q in slot %d", i, MaxPartitions, tag, Slot(tag))
		}
	}
	// The suffixes never change between versions: every process must find the same keys.
	if got := PartitionName("emails", 1, 3); got != pinnedEmails1of3 {
		t.Fatalf("PartitionName(emails, 1, 3) = %q, was %q", got, pinnedEmails1of3)
	}
}

// BenchmarkPartitionTags is what a process pays once per (queue, count) to name its partitions:
// here every tag of MaxPartitions partitions (the suffix table is built on the first call).
func BenchmarkPartitionTags(b *testing.B) {
	suffixTable()
	b.ReportAllocs()
	for n := 0; b.Loop(); n++ {
		q := "bench-" + strconv.Itoa(n)
		for i := range MaxPartitions {
			spreadTag(q, i, MaxPartitions)
		}
	}
}

// BenchmarkSuffixTable is the one-time build of the table of three-character suffixes.
func BenchmarkSuffixTable(b *testing.B) {
	for b.Loop() {
		buildSuffixTable()
	}
}

func TestScheduleKeys(t *testing.T) {
	t.Parallel()
	// A schedule's keys share one slot, and no queue (or partition) can name that tag.
	want := Slot(Schedules("p"))
	for _, k := range []string{SchedulesPaused("p"), ScheduleState("p", "nightly"), SchedulesLock("p")} {
		if Slot(k) != want {
			t.Fatalf("%s is in slot %d, not %d", k, Slot(k), want)
		}
	}
	if ValidateQueue(":schedules") == nil || ValidatePartition(":schedules") == nil {
		t.Fatal("a queue may take the schedules' hash tag")
	}
	for _, tc := range []struct {
		name string
		ok   bool
	}{{"nightly", true}, {"a.b-c_d", true}, {strings.Repeat("x", MaxScheduleLen), true}, {"", false},
		{strings.Repeat("x", MaxScheduleLen+1), false}, {"a:b", false}, {"a b", false}, {"{x}", false}} {
		if err := ValidateSchedule(tc.name); (err == nil) != tc.ok {
			t.Errorf("ValidateSchedule(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// The indexes of finished jobs share the queue's (or partition's) hash tag, so finish.lua and
// cancel.lua write them in the step that finishes the job.
func TestFinishedIndexKeys(t *testing.T) {
	t.Parallel()
	for _, q := range []Queue{New("cv", "emails"), New("cv", PartitionName("emails", 2, 3))} {
		for _, k := range []string{q.Completed(), q.Canceled()} {
			if Slot(k) != Slot(q.Stream()) || !strings.HasPrefix(k, q.Base()) {
				t.Errorf("%s is not in the slot of %s", k, q.Stream())
			}
		}
	}
	if got := New("cv", "emails").Completed(); got != "cv:{emails}:completed" {
		t.Errorf("Completed() = %q", got)
	}
}
