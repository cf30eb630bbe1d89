package keys

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// The checks of the text a caller gives a job: its type, its metadata, and the keys that
// become part of a Redis key (a unique key, a limit key, a debounce key). pipeline wraps their
// errors in its ErrInvalid.

// Limits of a job's metadata, which travels with every attempt and is handed to every handler.
const (
	MaxMetadataEntries = 64
	MaxMetadataBytes   = 8 << 10
)

// ValidateType accepts 1 to MaxNameLen bytes of UTF-8 with no spaces or control characters.
// The type is the last field of a stream entry's space-separated job field, and it is printed
// in logs and status lines.
func ValidateType(t string) error {
	if t == "" {
		return errors.New("empty job type")
	}
	if len(t) > MaxNameLen {
		return fmt.Errorf("job type longer than %d bytes", MaxNameLen)
	}
	switch textProblem(t, false) {
	case notUTF8:
		return fmt.Errorf("job type %q is not valid UTF-8", t)
	case hasControl, hasSpace:
		return fmt.Errorf("job type %q has a space or control character", t)
	}
	return nil
}

// ValidateMetadata checks a job's metadata: at most MaxMetadataEntries pairs and
// MaxMetadataBytes of keys and values. Keys are non-empty UTF-8 with no control characters,
// not starting with '_' (reserved). Values are UTF-8, since metadata is shown as JSON, which
// cannot carry other bytes.
func ValidateMetadata(md map[string]string) error {
	if len(md) > MaxMetadataEntries {
		return fmt.Errorf("metadata has %d entries, the limit is %d", len(md), MaxMetadataEntries)
	}
	size := 0
	for k, v := range md {
		size += len(k) + len(v)
		if k == "" || k[0] == '_' {
			return fmt.Errorf("metadata key %q: keys must be non-empty and not start with '_' (reserved)", k)
		}
		switch textProblem(k, true) {
		case notUTF8:
			return fmt.Errorf("metadata key %q is not valid UTF-8", k)
		case hasControl:
			return fmt.Errorf("metadata key %q has a control character", k)
		}
		if !utf8.ValidString(v) {
			return fmt.Errorf("metadata value of key %q is not valid UTF-8", k)
		}
	}
	if size > MaxMetadataBytes {
		return fmt.Errorf("metadata has %d bytes of keys and values, the limit is %d", size, MaxMetadataBytes)
	}
	return nil
}

// ValidateKeyText checks a caller's key that becomes part of a Redis key, named what in the
// error: 1 to MaxNameLen bytes of UTF-8 without control characters.
func ValidateKeyText(what, key string) error {
	if key == "" || len(key) > MaxNameLen {
		return fmt.Errorf("%s must be 1 to %d bytes", what, MaxNameLen)
	}
	switch textProblem(key, true) {
	case notUTF8:
		return fmt.Errorf("%s %q is not valid UTF-8", what, key)
	case hasControl:
		return fmt.Errorf("%s %q has a control character", what, key)
	}
	return nil
}

type textIssue int

const (
	textOK textIssue = iota
	notUTF8
	hasControl
	hasSpace
)

// textProblem reports the first problem of s as a name: invalid UTF-8, a control character
// (C0, DEL or C1) or, unless spaces are allowed, a Unicode space.
func textProblem(s string, spaces bool) textIssue {
	if !utf8.ValidString(s) {
		return notUTF8
	}
	for _, r := range s {
		switch {
		case unicode.IsControl(r):
			return hasControl
		case !spaces && unicode.IsSpace(r):
			return hasSpace
		}
	}
	return textOK
}
