// Package keyring encrypts job payloads and results at rest: Redis's memory, its RDB and AOF
// files, and the outbox table hold only ciphertext, under keys a deployment lists and rotates.
//
// A keyring is a list of named 256-bit keys. The first one listed seals every new value; any
// listed key opens a value sealed under it. Rotation is therefore two steps: list the new key
// first on every process, then re-seal what is stored (conveyor keys rotate), after which the
// old key can go.
//
// # The sealed form
//
// A sealed value is
//
//	0x00 'c' 'v' 'e' '1' | len(keyID) | keyID | nonce (12 bytes) | AES-256-GCM ciphertext and tag
//
// The leading zero byte cannot start a JSON document or UTF-8 text a person writes, so a reader
// tells a sealed value from a plain one by its first five bytes (Sealed) without a key, and
// says what it is without opening it (Describe: "<encrypted, 42 bytes, key k2>").
//
// The additional data binds a value to what it is (a payload, a result) and to its job's id: a
// ciphertext copied onto another job, or a result copied into a payload, does not open. One
// exception: a value sealed for no job (an empty job id) opens for any job of its kind. A
// debounced publish seals so (AnyJob), since the job it joins is chosen in Redis, after the
// payload was sealed.
//
// The nonce is not random: it is an HMAC of the key, the additional data and the plaintext
// (the synthetic-IV construction). The same job published twice with the same payload under
// the same key seals to the same bytes, which is what lets a publish sent again after a lost
// reply find its job unchanged rather than "published with another payload". The cost is that
// two equal payloads of one job id are seen to be equal, which the id already says. Two
// different plaintexts get different nonces unless HMAC-SHA-256 collides in 96 bits. Under two
// keys (a publish sent again across a rotation) the bytes differ: the publisher then opens
// both and compares the plaintexts (pipeline.ClientConfig.Keys).
//
// # The key file
//
// One key a line, its id, a space and its 32 bytes in standard base64; blank lines and lines
// starting with '#' are skipped. The first key seals. conveyor keys new prints a line to put
// first. The environment variable CONVEYOR_KEYS holds the same text, lines separated by
// newlines or ';'.
package keyring

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"os"
	"strings"
	"sync"
)

// Kind is what a sealed value is to its job. It is part of the additional data: a value
// sealed as one kind does not open as another.
type Kind string

// The kinds Conveyor seals.
const (
	Payload Kind = "payload"
	Result  Kind = "result"
	// Logs is an attempt's log lines (pipeline's Job.Logger): a handler may log what its
	// payload holds, so the lines are sealed with it.
	Logs Kind = "logs"
)

// EnvVar is the environment variable that FromEnv reads.
const EnvVar = "CONVEYOR_KEYS"

// KeySize is the size of a key in bytes (AES-256).
const KeySize = 32

// MaxIDLen is the longest key id: it is stored in every sealed value, one byte of length.
const MaxIDLen = 64

const (
	magic     = "\x00cve1"
	nonceSize = 12
	tagSize   = 16
)

// Overhead is what sealing adds to a value of a key id of n bytes.
func Overhead(n int) int { return len(magic) + 1 + n + nonceSize + tagSize }

var (
	// ErrUnknownKey is wrapped by Open's error when the value was sealed under a key this
	// keyring does not list (or when there is no keyring). KeyError says which.
	ErrUnknownKey = errors.New("keyring: value sealed under a key this keyring lacks")
	// ErrCorrupt is wrapped by Open's error when a sealed value is cut short or fails its
	// authentication: changed in storage, sealed for another job or kind, or not Conveyor's.
	ErrCorrupt = errors.New("keyring: sealed value does not open")
)

// KeyError is Open's error for a value sealed under a key the keyring lacks.
type KeyError struct{ KeyID string }

func (e *KeyError) Error() string {
	return fmt.Sprintf("keyring: value sealed under key %q, which this keyring lacks", e.KeyID)
}

// Unwrap makes errors.Is(err, ErrUnknownKey) true.
func (e *KeyError) Unwrap() error { return ErrUnknownKey }

type key struct {
	id    string
	aead  cipher.AEAD
	nonce []byte // the HMAC key the nonces are made with
	// macs holds HMACs keyed with nonce (hash.Hash), reset between uses: a new one costs its
	// allocations and its key's two blocks, more than the nonce of a small value.
	macs sync.Pool
}

// Keyring holds keys by id; the first seals. A nil *Keyring is valid and seals nothing: Seal
// returns the value as given, Open returns a plain value as given and refuses a sealed one. A
// Keyring is safe for concurrent use.
type Keyring struct {
	keys []*key
	byID map[string]*key
}

// New returns a keyring of the given keys, the first sealing. Each id must be 1 to 64 bytes of
// letters, digits, '.', '_' and '-', each secret 32 bytes, no id twice.
func New(ids []string, secrets [][]byte) (*Keyring, error) {
	if len(ids) == 0 || len(ids) != len(secrets) {
		return nil, errors.New("keyring: no keys")
	}
	k := &Keyring{byID: make(map[string]*key, len(ids))}
	for i, id := range ids {
		if err := validID(id); err != nil {
			return nil, err
		}
		if len(secrets[i]) != KeySize {
			return nil, fmt.Errorf("keyring: key %q is %d bytes, want %d", id, len(secrets[i]), KeySize)
		}
		if k.byID[id] != nil {
			return nil, fmt.Errorf("keyring: key %q listed twice", id)
		}
		// Subkeys, so that no key is both an AES key and an HMAC key.
		block, err := aes.NewCipher(derive(secrets[i], "conveyor keyring aes-256-gcm"))
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		kk := &key{id: id, aead: aead, nonce: derive(secrets[i], "conveyor keyring nonce")}
		k.keys = append(k.keys, kk)
		k.byID[id] = kk
	}
	return k, nil
}

func derive(secret []byte, label string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	return m.Sum(nil)
}

func validID(id string) error {
	if id == "" || len(id) > MaxIDLen {
		return fmt.Errorf("keyring: key id %q: want 1 to %d bytes", id, MaxIDLen)
	}
	for _, c := range []byte(id) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("keyring: key id %q: only letters, digits, '.', '_' and '-'", id)
		}
	}
	return nil
}

// Parse reads a key file's text (the package doc says its form). It names the line of any
// error, never a secret.
func Parse(text string) (*Keyring, error) {
	var ids []string
	var secrets [][]byte
	for n, line := range strings.FieldsFunc(text, func(r rune) bool { return r == '\n' || r == ';' }) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("keyring: entry %d: want \"ID BASE64-KEY\"", n+1)
		}
		secret, err := base64.StdEncoding.DecodeString(f[1])
		if err != nil {
			return nil, fmt.Errorf("keyring: entry %d (key %q): the key is not standard base64", n+1, f[0])
		}
		ids = append(ids, f[0])
		secrets = append(secrets, secret)
	}
	if len(ids) == 0 {
		return nil, errors.New("keyring: no keys listed")
	}
	return New(ids, secrets)
}

// Load reads the key file at path.
func Load(path string) (*Keyring, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("keyring: %w", err)
	}
	k, err := Parse(string(b))
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return k, nil
}

// FromEnv reads the keys in $CONVEYOR_KEYS: nil and no error when it is unset or empty.
func FromEnv() (*Keyring, error) {
	v := os.Getenv(EnvVar)
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	k, err := Parse(v)
	if err != nil {
		return nil, fmt.Errorf("%w (in $%s)", err, EnvVar)
	}
	return k, nil
}

// NewLine returns a key file line for a new random key named id.
func NewLine(id string) (string, error) {
	if err := validID(id); err != nil {
		return "", err
	}
	b := make([]byte, KeySize)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return id + " " + base64.StdEncoding.EncodeToString(b), nil
}

// Newest is the id of the key that seals; "" for a nil keyring.
func (k *Keyring) Newest() string {
	if k == nil {
		return ""
	}
	return k.keys[0].id
}

// IDs lists the keys' ids, the sealing one first.
func (k *Keyring) IDs() []string {
	if k == nil {
		return nil
	}
	ids := make([]string, len(k.keys))
	for i, kk := range k.keys {
		ids[i] = kk.id
	}
	return ids
}

// Has reports whether the keyring lists the key id.
func (k *Keyring) Has(id string) bool { return k != nil && k.byID[id] != nil }

func aad(kind Kind, jobID string) []byte {
	b := make([]byte, 0, 16+len(kind)+len(jobID))
	b = append(b, "conveyor/1\x00"...)
	b = append(b, kind...)
	b = append(b, 0)
	return append(b, jobID...)
}

// AnyJob is the job id of a value sealed for no job in particular: it opens as the value of
// any job (of its kind). Conveyor seals a debounced publish's payload so.
const AnyJob = ""

// Seal returns plain sealed under the newest key, for the job jobID as kind. A nil keyring
// returns plain itself. A value already sealed is returned as it is: sealing is done once.
func (k *Keyring) Seal(kind Kind, jobID string, plain []byte) []byte {
	if k == nil || Sealed(plain) {
		return plain
	}
	return k.keys[0].seal(kind, jobID, plain)
}

func (kk *key) seal(kind Kind, jobID string, plain []byte) []byte {
	ad := aad(kind, jobID)
	m, _ := kk.macs.Get().(hash.Hash)
	if m == nil {
		m = hmac.New(sha256.New, kk.nonce)
	}
	m.Write(ad)
	m.Write(plain)
	var sum [sha256.Size]byte
	nonce := m.Sum(sum[:0])[:nonceSize]
	m.Reset()
	kk.macs.Put(m)
	out := make([]byte, 0, Overhead(len(kk.id))+len(plain))
	out = append(out, magic...)
	out = append(out, byte(len(kk.id)))
	out = append(out, kk.id...)
	out = append(out, nonce...)
	return kk.aead.Seal(out, nonce, plain, ad)
}

// Sealed reports whether b is a sealed value (by its first bytes; Open checks the rest).
func Sealed(b []byte) bool { return len(b) >= len(magic) && string(b[:len(magic)]) == magic }

// split returns a sealed value's key id, nonce and ciphertext with its tag.
func split(b []byte) (id string, nonce, ct []byte, ok bool) {
	rawID, nonce, ct, ok := splitRaw(b)
	return string(rawID), nonce, ct, ok
}

// splitRaw is split with the key id as the value's own bytes: Open looks the key up with them
// and makes no string of the id unless it reports an error.
func splitRaw(b []byte) (id, nonce, ct []byte, ok bool) {
	if !Sealed(b) || len(b) < len(magic)+1 {
		return nil, nil, nil, false
	}
	n := int(b[len(magic)])
	rest := b[len(magic)+1:]
	if n == 0 || n > MaxIDLen || len(rest) < n+nonceSize+tagSize {
		return nil, nil, nil, false
	}
	return rest[:n], rest[n : n+nonceSize], rest[n+nonceSize:], true
}

// KeyID returns the id of the key a sealed value was sealed under; ok is false for a value
// that is not sealed or is cut short.
func KeyID(b []byte) (id string, ok bool) {
	id, _, _, ok = split(b)
	return id, ok
}

// PlainLen is the length of a sealed value's plaintext, -1 for a value that is not sealed.
func PlainLen(b []byte) int {
	_, _, ct, ok := split(b)
	if !ok {
		return -1
	}
	return len(ct) - tagSize
}

// Describe is what a reader without the key shows for a sealed value:
// "<encrypted, N bytes, key K>", N the plaintext's length. It returns "" for a value that is
// not sealed, and says so for one cut short.
func Describe(b []byte) string {
	if !Sealed(b) {
		return ""
	}
	id, _, ct, ok := split(b)
	if !ok {
		return fmt.Sprintf("<encrypted, damaged, %d bytes stored>", len(b))
	}
	return fmt.Sprintf("<encrypted, %d bytes, key %s>", len(ct)-tagSize, id)
}

// Open returns the plaintext of b, sealed for the job jobID (or AnyJob) as kind. A value that
// is not sealed is returned as it is (a job published before encryption was turned on). The
// error wraps ErrUnknownKey (a *KeyError) or ErrCorrupt.
func (k *Keyring) Open(kind Kind, jobID string, b []byte) ([]byte, error) {
	return k.open(kind, jobID, b, false)
}

// OpenInPlace is Open that writes the plaintext over b's ciphertext instead of allocating it:
// for a reader that owns b and needs its sealed bytes no more (a worker's copy of a payload it
// read). b is spoiled once the call returns, opened or not, so that the call tries jobID's
// binding only: a value sealed for AnyJob fails here, and the caller opens a pristine copy of
// it with Open.
func (k *Keyring) OpenInPlace(kind Kind, jobID string, b []byte) ([]byte, error) {
	return k.open(kind, jobID, b, true)
}

func (k *Keyring) open(kind Kind, jobID string, b []byte, inPlace bool) ([]byte, error) {
	if !Sealed(b) {
		return b, nil
	}
	rawID, nonce, ct, ok := splitRaw(b)
	if !ok {
		return nil, fmt.Errorf("%w: cut short (%d bytes)", ErrCorrupt, len(b))
	}
	var kk *key
	if k != nil {
		kk = k.byID[string(rawID)]
	}
	if kk == nil {
		return nil, &KeyError{KeyID: string(rawID)}
	}
	var dst []byte
	if inPlace {
		dst = ct[:0]
	}
	plain, err := kk.aead.Open(dst, nonce, ct, aad(kind, jobID))
	if err != nil && jobID != AnyJob && !inPlace {
		// Sealed for no job (a debounced publish): tried second, so that only such a value
		// pays for the second try.
		plain, err = kk.aead.Open(nil, nonce, ct, aad(kind, AnyJob))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s of job %q under key %q fails authentication", ErrCorrupt, kind, jobID, rawID)
	}
	return plain, nil
}

// Reseal returns b sealed under the newest key, for rotation: changed is false when b is
// already sealed under it (b is returned as it is), or when the keyring is nil. A plain value
// is sealed (changed true): a rotation also encrypts what was stored before encryption.
func (k *Keyring) Reseal(kind Kind, jobID string, b []byte) (out []byte, changed bool, err error) {
	if k == nil {
		return b, false, nil
	}
	if id, ok := KeyID(b); ok && id == k.keys[0].id {
		return b, false, nil
	}
	plain, err := k.Open(kind, jobID, b)
	if err != nil {
		return nil, false, err
	}
	return k.keys[0].seal(kind, jobID, plain), true, nil
}
