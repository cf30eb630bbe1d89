package keyring

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func secret(b byte) string {
	return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, KeySize))
}

func mustParse(t testing.TB, text string) *Keyring {
	t.Helper()
	k, err := Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		ids        []string
		err        string
	}{
		{"one", "k1 " + secret(1), []string{"k1"}, ""},
		{"first seals", "# new first\nk2 " + secret(2) + "\n\nk1 " + secret(1) + "\n", []string{"k2", "k1"}, ""},
		{"semicolons", "k2 " + secret(2) + ";k1 " + secret(1), []string{"k2", "k1"}, ""},
		{"empty", "# nothing\n", nil, "no keys listed"},
		{"no secret", "k1", nil, "want \"ID BASE64-KEY\""},
		{"bad base64", "k1 !!!", nil, "not standard base64"},
		{"short key", "k1 " + base64.StdEncoding.EncodeToString([]byte("short")), nil, "is 5 bytes, want 32"},
		{"twice", "k1 " + secret(1) + "\nk1 " + secret(2), nil, "listed twice"},
		{"bad id", "k/1 " + secret(1), nil, "only letters"},
		{"long id", strings.Repeat("k", 65) + " " + secret(1), nil, "1 to 64 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := Parse(tc.text)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				if strings.Contains(err.Error(), secret(1)) {
					t.Fatalf("the error shows a secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(k.IDs(), ","); got != strings.Join(tc.ids, ",") {
				t.Fatalf("ids %s, want %v", got, tc.ids)
			}
			if k.Newest() != tc.ids[0] {
				t.Fatalf("newest %s", k.Newest())
			}
		})
	}
}

func TestSealOpen(t *testing.T) {
	k := mustParse(t, "k1 "+secret(1))
	plain := []byte(`{"to":"a@example.com"}`)
	s := k.Seal(Payload, "job-1", plain)
	if !Sealed(s) || bytes.Contains(s, plain) {
		t.Fatalf("not sealed: %q", s)
	}
	if len(s) != len(plain)+Overhead(2) {
		t.Fatalf("sealed length %d, want %d", len(s), len(plain)+Overhead(2))
	}
	if got, err := k.Open(Payload, "job-1", s); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if again := k.Seal(Payload, "job-1", plain); !bytes.Equal(again, s) {
		t.Fatal("the same job, kind and payload sealed to other bytes: a re-sent publish would read as a conflict")
	}
	if other := k.Seal(Payload, "job-2", plain); bytes.Equal(other, s) {
		t.Fatal("two jobs' equal payloads sealed alike")
	}
	if k.Seal(Payload, "job-1", s) == nil || !bytes.Equal(k.Seal(Payload, "job-1", s), s) {
		t.Fatal("a sealed value was sealed again")
	}
	for _, tc := range []struct {
		name string
		kind Kind
		id   string
		b    []byte
	}{
		{"other job", Payload, "job-2", s},
		{"other kind", Result, "job-1", s},
		{"flipped byte", Payload, "job-1", flip(s, len(s)-1)},
		{"flipped nonce", Payload, "job-1", flip(s, len(magic)+3)},
		{"cut short", Payload, "job-1", s[:len(magic)+4]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := k.Open(tc.kind, tc.id, tc.b); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err %v, want ErrCorrupt", err)
			}
		})
	}
	if got, err := k.Open(Payload, "job-1", plain); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("a plain value: %q, %v", got, err)
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 1
	return c
}

func TestUnknownKey(t *testing.T) {
	old := mustParse(t, "k1 "+secret(1))
	s := old.Seal(Result, "j", []byte("r"))
	for _, k := range []*Keyring{nil, mustParse(t, "k2 "+secret(2))} {
		_, err := k.Open(Result, "j", s)
		var ke *KeyError
		if !errors.Is(err, ErrUnknownKey) || !errors.As(err, &ke) || ke.KeyID != "k1" {
			t.Fatalf("err %v, want a KeyError for k1", err)
		}
	}
	// The same id with another secret is not the key: the value fails authentication.
	if _, err := mustParse(t, "k1 "+secret(9)).Open(Result, "j", s); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err %v, want ErrCorrupt", err)
	}
}

func TestRotation(t *testing.T) {
	k1 := mustParse(t, "k1 "+secret(1))
	both := mustParse(t, "k2 "+secret(2)+"\nk1 "+secret(1))
	s1 := k1.Seal(Payload, "j", []byte("p"))
	s2, changed, err := both.Reseal(Payload, "j", s1)
	if err != nil || !changed {
		t.Fatalf("Reseal = %v, %v", changed, err)
	}
	if id, _ := KeyID(s2); id != "k2" {
		t.Fatalf("resealed under %s", id)
	}
	if _, changed, _ := both.Reseal(Payload, "j", s2); changed {
		t.Fatal("a value under the newest key was sealed again")
	}
	if p, err := mustParse(t, "k2 "+secret(2)).Open(Payload, "j", s2); err != nil || string(p) != "p" {
		t.Fatalf("after rotation, the new key alone: %q, %v", p, err)
	}
	plain, changed, err := both.Reseal(Payload, "j", []byte("old plain"))
	if err != nil || !changed || !Sealed(plain) {
		t.Fatal("a plain value stored before encryption was not sealed by a rotation")
	}
	if _, changed, _ := (*Keyring)(nil).Reseal(Payload, "j", s1); changed {
		t.Fatal("a nil keyring changed a value")
	}
}

func TestNilKeyring(t *testing.T) {
	var k *Keyring
	if got := k.Seal(Payload, "j", []byte("x")); string(got) != "x" {
		t.Fatalf("nil Seal = %q", got)
	}
	if k.Newest() != "" || k.IDs() != nil || k.Has("k1") {
		t.Fatal("a nil keyring lists keys")
	}
}

func TestDescribe(t *testing.T) {
	k := mustParse(t, "prod-2026 "+secret(3))
	s := k.Seal(Payload, "j", make([]byte, 42))
	if got := Describe(s); got != "<encrypted, 42 bytes, key prod-2026>" {
		t.Fatalf("Describe = %q", got)
	}
	if Describe([]byte(`{"a":1}`)) != "" {
		t.Fatal("a plain value described as encrypted")
	}
	if got := Describe(s[:7]); !strings.Contains(got, "damaged") {
		t.Fatalf("a cut value: %q", got)
	}
	if PlainLen(s) != 42 || PlainLen([]byte("x")) != -1 {
		t.Fatal("PlainLen")
	}
}

func TestNewLine(t *testing.T) {
	line, err := NewLine("k9")
	if err != nil {
		t.Fatal(err)
	}
	k := mustParse(t, line)
	if k.Newest() != "k9" {
		t.Fatal(k.IDs())
	}
	if _, err := NewLine("bad id"); err == nil {
		t.Fatal("a bad id accepted")
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv(EnvVar, "")
	if k, err := FromEnv(); k != nil || err != nil {
		t.Fatalf("unset: %v, %v", k, err)
	}
	t.Setenv(EnvVar, "k1 "+secret(1))
	if k, err := FromEnv(); err != nil || k.Newest() != "k1" {
		t.Fatalf("%v, %v", k, err)
	}
	t.Setenv(EnvVar, "k1")
	if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), EnvVar) {
		t.Fatalf("err %v should name the variable", err)
	}
}

// FuzzOpen feeds arbitrary stored bytes to the readers of a sealed value: none may panic, and
// whatever opens must seal back to the same bytes.
func FuzzOpen(f *testing.F) {
	k := mustParse(f, "k1 "+secret(1))
	f.Add(k.Seal(Payload, "j", []byte("hello")), "j")
	f.Add([]byte("\x00cve1\x02k1"), "j")
	f.Add([]byte(`{"plain":true}`), "j")
	f.Fuzz(func(t *testing.T, b []byte, id string) {
		_ = Describe(b)
		_ = PlainLen(b)
		_, _ = KeyID(b)
		p, err := k.Open(Payload, id, b)
		if err == nil && Sealed(b) && !bytes.Equal(k.Seal(Payload, id, p), b) {
			t.Fatalf("%q opened but does not seal back", b)
		}
	})
}

func FuzzParse(f *testing.F) {
	f.Add("k1 " + secret(1))
	f.Add("# c\nk2 " + secret(2) + ";k1 x")
	f.Fuzz(func(t *testing.T, text string) {
		k, err := Parse(text)
		if err == nil && len(k.IDs()) == 0 {
			t.Fatal("a keyring of no keys")
		}
	})
}

// TestAnyJob: a value sealed for no job (a debounced publish) opens as any job's value of its
// kind, and not as another kind.
func TestAnyJob(t *testing.T) {
	k, err := New([]string{"k1"}, [][]byte{make([]byte, KeySize)})
	if err != nil {
		t.Fatal(err)
	}
	s := k.Seal(Payload, AnyJob, []byte("p"))
	for _, id := range []string{"a", "b", AnyJob} {
		if p, err := k.Open(Payload, id, s); err != nil || string(p) != "p" {
			t.Fatalf("Open as job %q: %q, %v", id, p, err)
		}
	}
	if _, err := k.Open(Result, "a", s); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("opened as a result: %v", err)
	}
	bound := k.Seal(Payload, "a", []byte("p"))
	if _, err := k.Open(Payload, "b", bound); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a value bound to job a opened as job b's: %v", err)
	}
}

// A worker opens its own copy of a payload in place: no copy is made, and a value sealed for
// no job, which the in-place try cannot open, still opens from a pristine copy with Open.
func TestOpenInPlace(t *testing.T) {
	k := mustParse(t, "k1 "+secret(1))
	plain := []byte(strings.Repeat("payload ", 40))
	b := k.Seal(Payload, "job1", plain)
	got, err := k.OpenInPlace(Payload, "job1", b)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("OpenInPlace = %q, %v", got, err)
	}
	if &got[0] != &b[len(b)-len(plain)-tagSize] {
		t.Fatal("the plaintext was not written over the ciphertext")
	}

	any := k.Seal(Payload, AnyJob, plain)
	pristine := bytes.Clone(any)
	if _, err := k.OpenInPlace(Payload, "job1", any); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("OpenInPlace of a value sealed for no job: %v, want ErrCorrupt", err)
	}
	if got, err := k.Open(Payload, "job1", pristine); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Open of the pristine copy = %q, %v", got, err)
	}

	other := mustParse(t, "k9 "+secret(9))
	if _, err := other.OpenInPlace(Payload, "job1", k.Seal(Payload, "job1", plain)); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("OpenInPlace without the key: %v, want ErrUnknownKey", err)
	}
}
