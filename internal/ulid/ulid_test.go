package ulid

import (
	"bytes"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The spec's example, and the extremes of the 128 bits.
func TestStringAndParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text string
		ms   uint64
	}{
		{"01ARZ3NDEKTSV4RRFFQ69G5FAV", 1469922850259},
		{"00000000000000000000000000", 0},
		{"7ZZZZZZZZZZZZZZZZZZZZZZZZZ", maxTime},
	} {
		u, err := Parse(tc.text)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.text, err)
		}
		if got := u.String(); got != tc.text {
			t.Errorf("Parse(%q).String() = %q", tc.text, got)
		}
		if u.Time() != tc.ms {
			t.Errorf("Parse(%q).Time() = %d, want %d", tc.text, u.Time(), tc.ms)
		}
		if lower, err := Parse(strings.ToLower(tc.text)); err != nil || lower != u {
			t.Errorf("Parse of %q in lower case: %v, %v", tc.text, lower, err)
		}
	}
	for _, bad := range []string{"", "01ARZ3NDEKTSV4RRFFQ69G5FA", "01ARZ3NDEKTSV4RRFFQ69G5FAVV",
		"01ARZ3NDEKTSV4RRFFQ69G5FAU", "01ARZ3NDEKTSV4RRFFQ69G5FA!", "80000000000000000000000000"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

// String agrees with a plain base-32 conversion of the 128-bit number, padded to 26 digits,
// over random values and values with one bit set or clear (every character's edges).
func TestStringReference(t *testing.T) {
	t.Parallel()
	reference := func(u ULID) string {
		n := new(big.Int).SetBytes(u[:])
		out := make([]byte, Len)
		for i := Len - 1; i >= 0; i-- {
			out[i] = alphabet[new(big.Int).And(n, big.NewInt(31)).Int64()]
			n.Rsh(n, 5)
		}
		return string(out)
	}
	var values []ULID
	for bit := range 128 {
		var one ULID
		one[15-bit/8] = 1 << (bit % 8)
		all := ULID{}
		for i := range all {
			all[i] = ^one[i]
		}
		values = append(values, one, all)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		var u ULID
		for i := range u {
			u[i] = byte(r.Uint32())
		}
		values = append(values, u)
	}
	for _, u := range values {
		want := reference(u)
		if got := u.String(); got != want {
			t.Fatalf("%x: String() = %q, want %q", u[:], got, want)
		}
		if back, err := Parse(want); err != nil || back != u {
			t.Fatalf("Parse(%q) = %x, %v, want %x", want, back[:], err, u[:])
		}
		if got, want := u.Time(), new(big.Int).SetBytes(u[:6]).Uint64(); got != want {
			t.Fatalf("%x: Time() = %d, want %d", u[:], got, want)
		}
	}
}

// An id is 26 characters of the alphabet, carries the time it was made, and reads back.
func TestMakeFormat(t *testing.T) {
	t.Parallel()
	before := uint64(time.Now().UnixMilli())
	u := Make()
	after := uint64(time.Now().UnixMilli())
	s := u.String()
	if len(s) != Len || strings.Trim(s, alphabet) != "" {
		t.Fatalf("Make() = %q", s)
	}
	// A step back of the clock may keep the last id's millisecond (up to maxStepBack).
	if u.Time()+maxStepBack < before || u.Time() > after+1 {
		t.Fatalf("Make() at %d, made between %d and %d", u.Time(), before, after)
	}
	if back, err := Parse(s); err != nil || back != u {
		t.Fatalf("Parse(%q) = %v, %v", s, back, err)
	}
}

// Ids made one after another sort in that order, as text and as bytes, within one
// millisecond and across a step back of the clock under maxStepBack; a longer step starts
// afresh at the clock's time.
func TestMakeMonotonic(t *testing.T) {
	// Not parallel: it sets the clock makeAt sees, and other tests' Make calls would see the
	// generator's state move.
	now := time.UnixMilli(1_700_000_000_000)
	prev := makeAt(now)
	for i := range 10000 {
		at := now
		if i%1000 == 999 {
			at = now.Add(-500 * time.Millisecond) // a step back
		}
		u := makeAt(at)
		if u.String() <= prev.String() || bytes.Compare(u[:], prev[:]) <= 0 {
			t.Fatalf("id %d: %s not after %s", i, u, prev)
		}
		if u.Time() != uint64(now.UnixMilli()) {
			t.Fatalf("id %d at %d, want the last millisecond %d", i, u.Time(), now.UnixMilli())
		}
		prev = u
	}
	later := makeAt(now.Add(time.Millisecond))
	if later.String() <= prev.String() {
		t.Fatalf("the next millisecond's %s not after %s", later, prev)
	}
	far := makeAt(now.Add(-time.Hour))
	if far.Time() != uint64(now.Add(-time.Hour).UnixMilli()) {
		t.Fatalf("after a step back of an hour, id at %d", far.Time())
	}
}

// When the random part would overflow its 80 bits, the id moves to the next millisecond
// rather than wrap (which would sort it first).
func TestMakeOverflow(t *testing.T) {
	// Not parallel: it sets the generator's state.
	now := time.UnixMilli(1_700_000_000_000)
	makeAt(now)
	gen.Lock()
	gen.hi, gen.lo = 0xFFFF, ^uint64(0)-1
	gen.Unlock()
	prev := pack(uint64(now.UnixMilli()), 0xFFFF, ^uint64(0)-1)
	u := makeAt(now)
	if u.String() <= prev.String() || u.Time() != uint64(now.UnixMilli())+1 {
		t.Fatalf("after the largest random part, %s (at %d)", u, u.Time())
	}
	if next := makeAt(now); next.String() <= u.String() {
		t.Fatalf("%s not after %s", next, u)
	}
}

// Ids made at once on many goroutines are all different, and each goroutine's sort in the
// order it made them.
func TestMakeConcurrent(t *testing.T) {
	t.Parallel()
	const goroutines, each = 8, 5000
	ids := make([][]string, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				ids[g] = append(ids[g], Make().String())
			}
		})
	}
	wg.Wait()
	seen := make(map[string]bool, goroutines*each)
	for g, mine := range ids {
		if !slices.IsSorted(mine) {
			t.Errorf("goroutine %d's ids out of order", g)
		}
		for _, id := range mine {
			if seen[id] {
				t.Fatalf("id %s made twice", id)
			}
			seen[id] = true
		}
	}
}

// Parse accepts exactly the texts String makes (in either case), and the two round-trip.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"01ARZ3NDEKTSV4RRFFQ69G5FAV", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", "80000000000000000000000000",
		"0000000000000000000000000i", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := Parse(s)
		if err != nil {
			return
		}
		if got := u.String(); got != strings.ToUpper(s) {
			t.Fatalf("Parse(%q).String() = %q", s, got)
		}
		if back, err := Parse(u.String()); err != nil || back != u {
			t.Fatalf("round trip of %q: %v, %v", s, back, err)
		}
	})
}

// NewID of package pipeline is Make().String(): one per enqueued job.
func BenchmarkNewID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sink = Make().String()
	}
}

func BenchmarkString(b *testing.B) {
	b.ReportAllocs()
	u := Make()
	for b.Loop() {
		sink = u.String()
	}
}

var sink string
