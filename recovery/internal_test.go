package recovery

import "testing"

func TestNextID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"1700000000000-0", "1700000000000-1"},
		{"5-41", "5-42"},
		{"0-18446744073709551614", "0-18446744073709551615"},
		{"7-18446744073709551615", "8-0"},
		{"garbage", "garbage"},
		{"1-x", "1-x"},
	} {
		if got := nextID(tc.in); got != tc.want {
			t.Errorf("nextID(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
