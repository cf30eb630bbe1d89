// Package ulid makes ULIDs (github.com/ulid/spec): 26 characters of Crockford's base32 over a
// 48-bit Unix time in milliseconds and 80 random bits. Such ids sort by creation time as plain
// strings.
//
// Make is monotonic within the process, as oklog/ulid's Make is, which it replaces: an id made
// in the same millisecond as the one before gets that one's random part plus a random step.
// So ids made in sequence sort in the order they were made. This holds across a step back of
// the clock under a second too: ids keep the last millisecond until the clock passes it.
package ulid

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync"
	"time"
)

// Len is the length of a ULID's text.
const Len = 26

// alphabet is Crockford's base32: digits and capitals without I, L, O and U.
const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// maxTime is the largest timestamp a ULID holds (48 bits).
const maxTime = 1<<48 - 1

// maxStepBack is how far the clock may go back with ids still following the last one. A
// longer step starts afresh at the clock's time, as oklog/ulid does on any step.
const maxStepBack = 1000 // milliseconds

// ULID is a ULID's 16 bytes: the timestamp big-endian in the first 6, the random part after.
type ULID [16]byte

// gen is the process's monotonic state: the last id's millisecond and random part.
var gen struct {
	sync.Mutex
	ms      uint64
	hi      uint16 // the random part's top 16 bits
	lo      uint64 // its low 64 bits
	started bool
}

// Make returns a new ULID for the current time, later in sort order than every one Make
// returned before in the same millisecond.
func Make() ULID { return makeAt(time.Now()) }

func makeAt(now time.Time) ULID {
	ms := uint64(now.UnixMilli()) & maxTime
	gen.Lock()
	defer gen.Unlock()
	if gen.started && ms <= gen.ms && gen.ms-ms <= maxStepBack {
		ms = gen.ms
		// Step by a random amount below 2^32, as oklog/ulid's Monotonic(r, 0) does: the next
		// id is not guessable from this one. On the (2^-48 likely) overflow of the 80 bits,
		// move to the next millisecond instead of failing.
		step := 1 + rand.Uint64N(1<<32-1)
		lo := gen.lo + step
		hi := gen.hi
		if lo < gen.lo {
			hi++
		}
		if hi < gen.hi {
			ms, lo, hi = (ms+1)&maxTime, 0, 0
		}
		gen.ms, gen.hi, gen.lo = ms, hi, lo
	} else {
		var b [10]byte
		_, _ = crand.Read(b[:]) // never fails: crypto/rand panics rather than return an error
		gen.ms = ms
		gen.hi = uint16(b[0])<<8 | uint16(b[1])
		gen.lo = binary.BigEndian.Uint64(b[2:])
		gen.started = true
	}
	return pack(gen.ms, gen.hi, gen.lo)
}

func pack(ms uint64, hi uint16, lo uint64) ULID {
	var u ULID
	binary.BigEndian.PutUint64(u[:8], ms<<16|uint64(hi))
	binary.BigEndian.PutUint64(u[8:], lo)
	return u
}

// Time is the ULID's timestamp in Unix milliseconds.
func (u ULID) Time() uint64 {
	return binary.BigEndian.Uint64(u[:8]) >> 16
}

// String is the ULID's 26 characters. The first holds the top 3 of 128 bits (a 130-bit
// number with two leading zero bits), so it is at most '7'.
//
// It is unrolled: every enqueued job gets an id, and the bit loop it replaced cost about 430
// more instructions each (docs/BENCHMARKS.md, issue 32). Each character is 5 bits at a fixed
// shift of the two big-endian halves.
func (u ULID) String() string {
	hi := binary.BigEndian.Uint64(u[:8])
	lo := binary.BigEndian.Uint64(u[8:])
	var out [Len]byte
	out[0] = alphabet[hi>>61]
	out[1] = alphabet[hi>>56&31]
	out[2] = alphabet[hi>>51&31]
	out[3] = alphabet[hi>>46&31]
	out[4] = alphabet[hi>>41&31]
	out[5] = alphabet[hi>>36&31]
	out[6] = alphabet[hi>>31&31]
	out[7] = alphabet[hi>>26&31]
	out[8] = alphabet[hi>>21&31]
	out[9] = alphabet[hi>>16&31]
	out[10] = alphabet[hi>>11&31]
	out[11] = alphabet[hi>>6&31]
	out[12] = alphabet[hi>>1&31]
	out[13] = alphabet[(hi<<4|lo>>60)&31] // the one character over both halves
	out[14] = alphabet[lo>>55&31]
	out[15] = alphabet[lo>>50&31]
	out[16] = alphabet[lo>>45&31]
	out[17] = alphabet[lo>>40&31]
	out[18] = alphabet[lo>>35&31]
	out[19] = alphabet[lo>>30&31]
	out[20] = alphabet[lo>>25&31]
	out[21] = alphabet[lo>>20&31]
	out[22] = alphabet[lo>>15&31]
	out[23] = alphabet[lo>>10&31]
	out[24] = alphabet[lo>>5&31]
	out[25] = alphabet[lo&31]
	return string(out[:])
}

// ErrInvalid is Parse's error for text that is not a ULID.
var ErrInvalid = errors.New("ulid: not a ULID")

// Parse reads a ULID's text, in either case (Crockford's alphabet is case-insensitive).
func Parse(s string) (ULID, error) {
	var u ULID
	if len(s) != Len {
		return u, ErrInvalid
	}
	var acc uint32
	bits := 0
	pos := 15
	for i := Len - 1; i >= 0; i-- {
		v := decode[s[i]]
		if v == 0xFF {
			return ULID{}, ErrInvalid
		}
		if i == 0 {
			if v > 7 { // more than 128 bits
				return ULID{}, ErrInvalid
			}
		}
		acc |= uint32(v) << bits
		bits += 5
		for bits >= 8 && pos >= 0 {
			u[pos] = byte(acc)
			pos--
			acc >>= 8
			bits -= 8
		}
	}
	return u, nil
}

// decode maps a byte to its value in the alphabet, 0xFF for a byte not in it.
var decode = func() [256]byte {
	var d [256]byte
	for i := range d {
		d[i] = 0xFF
	}
	for i := range len(alphabet) {
		d[alphabet[i]] = byte(i)
		if c := alphabet[i]; c >= 'A' && c <= 'Z' {
			d[c+'a'-'A'] = byte(i)
		}
	}
	return d
}()
