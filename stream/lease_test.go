package stream

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEntryIDs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    string
		want entryID
		ok   bool
	}{
		{"1700000000123-0", entryID{1700000000123, 0}, true},
		{"0-1", entryID{0, 1}, true},
		{"18446744073709551615-18446744073709551615", entryID{math.MaxUint64, math.MaxUint64}, true},
		{"5", entryID{}, false},
		{"x-1", entryID{}, false},
		{"1-x", entryID{}, false},
		{"-", entryID{}, false},
	} {
		got, ok := parseID(tc.s)
		assert.Equal(t, tc.ok, ok, tc.s)
		if tc.ok {
			assert.Equal(t, tc.want, got, tc.s)
			assert.Equal(t, tc.s, got.String())
		}
	}
	assert.Equal(t, entryID{5, 8}, entryID{5, 7}.next())
	assert.Equal(t, entryID{6, 0}, entryID{5, math.MaxUint64}.next())
	assert.Negative(t, entryID{5, 9}.cmp(entryID{6, 0}))
	assert.Positive(t, entryID{5, 10}.cmp(entryID{5, 9}))
	assert.Zero(t, entryID{5, 9}.cmp(entryID{5, 9}))
}

func TestSpans(t *testing.T) {
	t.Parallel()
	id := func(ms, seq uint64) string { return fmt.Sprintf("%d-%d", ms, seq) }
	p := func(s string) entryID { e, ok := parseID(s); require.True(t, ok); return e }
	tp := &topic{sweep: make(chan struct{}, 1)}
	st := newStreamState()

	// Reads of 1-0..1-4 and 3-0..3-9 (another consumer got 2-x), an adoption of 2-5, and a
	// read again from before (the group's position moved back) overlapping the first.
	st.noteLocked(id(1, 0), id(1, 4), tp)
	st.noteLocked(id(3, 0), id(3, 9), tp)
	st.noteLocked(id(2, 5), id(2, 5), tp)
	st.noteLocked(id(1, 3), id(1, 7), tp)
	st.noteLocked(id(9, 0), id(9, 3), tp)
	all := entryID{math.MaxUint64, math.MaxUint64}

	// Nothing listed in 3-x: it goes.
	st.pruneLocked(entryID{}, all, []entryID{p(id(1, 6)), p(id(2, 5)), p(id(9, 3))})
	assert.Equal(t, []span{
		{p(id(1, 0)), p(id(1, 7))}, // merged
		{p(id(2, 5)), p(id(2, 5))},
		{p(id(9, 0)), p(id(9, 3))},
	}, st.spans)
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{id(0, 9), false}, {id(1, 0), true}, {id(1, 7), true}, {id(1, 8), false},
		{id(2, 4), false}, {id(2, 5), true}, {id(2, 6), false}, {id(3, 5), false},
		{id(9, 2), true}, {id(10, 0), false},
	} {
		assert.Equal(t, tc.want, st.spannedLocked(p(tc.id)), tc.id)
	}

	// A listing that covered only part of the ids prunes only spans inside it.
	st.pruneLocked(p(id(2, 0)), p(id(5, 0)), nil)
	assert.Equal(t, []span{{p(id(1, 0)), p(id(1, 7))}, {p(id(9, 0)), p(id(9, 3))}}, st.spans)
	st.pruneLocked(entryID{}, all, nil)
	assert.Empty(t, st.spans)

	// Many spans noted between sweeps ask for one.
	for i := range uint64(minSweepAt) {
		st.noteLocked(id(100+i, 0), id(100+i, 0), tp)
	}
	select {
	case <-tp.sweep:
	default:
		t.Fatal("no sweep asked for")
	}
}
