package keyring_test

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/conveyorq/conveyor/keyring"
)

// The cost of sealing and opening a payload, the work encryption at rest adds to a publish
// and to a worker's read (docs/BENCHMARKS.md, "Issue 35: encryption and a bound, end to end").
func BenchmarkSeal(b *testing.B) {
	for _, size := range []int{100, 1024, 16 << 10} {
		b.Run(sizeName(size), func(b *testing.B) {
			k := benchRing(b)
			plain := bytes.Repeat([]byte{'x'}, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				_ = k.Seal(keyring.Payload, "01JBENCHJOB0000000000000000", plain)
			}
		})
	}
}

func BenchmarkOpen(b *testing.B) {
	for _, size := range []int{100, 1024, 16 << 10} {
		b.Run(sizeName(size), func(b *testing.B) {
			k := benchRing(b)
			sealed := k.Seal(keyring.Payload, "01JBENCHJOB0000000000000000", bytes.Repeat([]byte{'x'}, size))
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := k.Open(keyring.Payload, "01JBENCHJOB0000000000000000", sealed); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchRing(b *testing.B) *keyring.Keyring {
	k, err := keyring.Parse("bench AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=")
	if err != nil {
		b.Fatal(err)
	}
	return k
}

func sizeName(n int) string {
	if n >= 1024 {
		return strconv.Itoa(n/1024) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}
