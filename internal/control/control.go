// Package control reads the control keys of a Watermill message (package metakey) into the
// settings of the job it becomes. It is the one reading of them. pipeline.Publisher reads
// through it, and so does a Worker adopting a message of another Watermill publisher.
//
// It sits below pipeline so that the public package keeps only the conversion of Values into
// its options. Its checks are the Client's (internal/keys' bounds and text rules), so that a
// message is refused here, naming its key, rather than by an option. Its errors are plain:
// pipeline wraps each in ErrInvalid. A bad job type is a TypeError, whose inner error pipeline
// wraps, as the Client's own check of a type.
package control

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/metakey"
)

// Values is what a message's control keys set. A Has flag, or a non-empty key, says that a
// setting was given; the rest keep the caller's defaults.
type Values struct {
	// Type is the message's job type, else the default given to Read.
	Type string

	Delay    time.Duration
	HasDelay bool
	RunAt    time.Time
	HasRunAt bool

	MaxRetries    int
	HasMaxRetries bool
	Timeout       time.Duration
	HasTimeout    bool

	// UniqueKey is "" without one. UniqueTTL is 0 when the message gives none: the caller's
	// default applies.
	UniqueKey string
	UniqueTTL time.Duration

	// Priority is 0 without one.
	Priority int
	Group    string
	LimitKey string

	Retention    time.Duration
	HasRetention bool

	// DebounceKey is "" without debouncing; then the quiet and the max wait are 0.
	DebounceKey     string
	DebounceQuiet   time.Duration
	DebounceMaxWait time.Duration
}

// TypeError is Read's error for a bad job type. Its text is the key, then Err.
type TypeError struct{ Err error }

func (e *TypeError) Error() string { return metakey.Type + ": " + e.Err.Error() }
func (e *TypeError) Unwrap() error { return e.Err }

// IsKey reports whether k is a control key.
func IsKey(k string) bool {
	switch k {
	case metakey.Type, metakey.Delay, metakey.RunAt, metakey.MaxRetries, metakey.Timeout,
		metakey.UniqueKey, metakey.UniqueTTL:
		return true
	}
	return PublisherOnly(k)
}

// PublisherOnly reports whether k is a control key that only the Publisher reads. A Worker
// adopting another publisher's message cannot apply it, as the entry is already written.
func PublisherOnly(k string) bool {
	switch k {
	case metakey.Priority, metakey.Group, metakey.LimitKey, metakey.Retention,
		metakey.DebounceKey, metakey.DebounceQuiet, metakey.DebounceMaxWait:
		return true
	}
	return false
}

// UnknownKey is the error of a metadata key that starts with metakey.Prefix but is no control
// key.
func UnknownKey(k string) error {
	return fmt.Errorf("metadata key %q: unknown control key (keys starting with %q are reserved for Conveyor's control keys)", k, metakey.Prefix)
}

// Adoptable picks the control keys out of md, the metadata of a message of another publisher.
// It returns why the message cannot be adopted instead when a key is unknown or the
// Publisher's only, or when neither md nor the worker (defaultType) gives a job type.
func Adoptable(md map[string]string, defaultType string) (ctrl map[string]string, reason string) {
	ctrl = make(map[string]string, 4)
	for k, v := range md {
		if !strings.HasPrefix(k, metakey.Prefix) {
			continue
		}
		if !IsKey(k) {
			return nil, UnknownKey(k).Error()
		}
		if PublisherOnly(k) {
			return nil, k + ": set by Conveyor's Publisher only; a message of another publisher cannot carry it (its entry is written already)"
		}
		ctrl[k] = v
	}
	if _, ok := ctrl[metakey.Type]; !ok && defaultType == "" {
		return nil, "a message of another publisher without " + metakey.Type + " metadata, and the worker has no DefaultType"
	}
	return ctrl, ""
}

// Read checks the control keys ctrl and returns what they set. Without metakey.Type the type
// is defaultType; with neither, Read fails. Keys are checked in a fixed order, so the error
// names the first bad one.
func Read(ctrl map[string]string, defaultType string) (Values, error) {
	var v Values
	if s, ok := ctrl[metakey.Type]; ok {
		if err := keys.ValidateType(s); err != nil {
			return Values{}, &TypeError{Err: err}
		}
		v.Type = s
	} else if defaultType == "" {
		return Values{}, fmt.Errorf("no job type: the message has no %s and the publisher no DefaultType", metakey.Type)
	} else {
		v.Type = defaultType
	}
	for _, read := range []func(map[string]string, *Values) error{readDue, readAttempts, readUnique, readPlacement, readDebounce} {
		if err := read(ctrl, &v); err != nil {
			return Values{}, err
		}
	}
	return v, nil
}

// bad is the error of key's value s.
func bad(key, s, format string, args ...any) error {
	return fmt.Errorf("%s %q: %s", key, s, fmt.Sprintf(format, args...))
}

// duration reads key's value s as a Go duration of at least 0.
func duration(key, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, bad(key, s, "not a Go duration (such as 90s or 1h30m)")
	}
	if d < 0 {
		return 0, bad(key, s, "negative")
	}
	return d, nil
}

// readDue reads the delay or the run-at time, which exclude each other.
func readDue(ctrl map[string]string, v *Values) error {
	delay, hasDelay := ctrl[metakey.Delay]
	runAt, hasRunAt := ctrl[metakey.RunAt]
	switch {
	case hasDelay && hasRunAt:
		return fmt.Errorf("%s and %s together", metakey.Delay, metakey.RunAt)
	case hasDelay:
		d, err := duration(metakey.Delay, delay)
		if err != nil {
			return err
		}
		v.Delay, v.HasDelay = d, true
	case hasRunAt:
		at, err := parseRunAt(runAt)
		if err != nil {
			return bad(metakey.RunAt, runAt, "%v", err)
		}
		if at.After(keys.MaxRunAt) {
			return bad(metakey.RunAt, runAt, "after %s", keys.MaxRunAt.Format(time.RFC3339))
		}
		v.RunAt, v.HasRunAt = at, true
	}
	return nil
}

// readAttempts reads the retry count and the timeout.
func readAttempts(ctrl map[string]string, v *Values) error {
	if s, ok := ctrl[metakey.MaxRetries]; ok {
		n, err := strconv.Atoi(s)
		if err != nil {
			return bad(metakey.MaxRetries, s, "not an integer")
		}
		if n < 0 || n > keys.MaxRetries {
			return bad(metakey.MaxRetries, s, "outside 0..%d", keys.MaxRetries)
		}
		v.MaxRetries, v.HasMaxRetries = n, true
	}
	if s, ok := ctrl[metakey.Timeout]; ok {
		d, err := duration(metakey.Timeout, s)
		if err != nil {
			return err
		}
		v.Timeout, v.HasTimeout = d, true
	}
	return nil
}

// readUnique reads the unique key and its TTL, which needs the key.
func readUnique(ctrl map[string]string, v *Values) error {
	key, hasKey := ctrl[metakey.UniqueKey]
	ttlS, hasTTL := ctrl[metakey.UniqueTTL]
	switch {
	case hasTTL && !hasKey:
		return fmt.Errorf("%s without %s", metakey.UniqueTTL, metakey.UniqueKey)
	case !hasKey:
		return nil
	}
	if key == "" || len(key) > keys.MaxNameLen {
		return bad(metakey.UniqueKey, key, "must be 1 to %d bytes", keys.MaxNameLen)
	}
	if err := keys.ValidateKeyText("unique key", key); err != nil {
		return fmt.Errorf("%s: %v", metakey.UniqueKey, err)
	}
	v.UniqueKey = key
	if hasTTL {
		d, err := duration(metakey.UniqueTTL, ttlS)
		if err != nil {
			return err
		}
		if d == 0 {
			return bad(metakey.UniqueTTL, ttlS, "must be positive")
		}
		v.UniqueTTL = d
	}
	return nil
}

// readPlacement reads the Publisher's own keys but debounce: priority, group, limit key and
// retention.
func readPlacement(ctrl map[string]string, v *Values) error {
	if s, ok := ctrl[metakey.Priority]; ok {
		n, err := strconv.Atoi(s)
		if err != nil {
			return bad(metakey.Priority, s, "not an integer")
		}
		if n < keys.MinPriority || n > keys.MaxPriority {
			return bad(metakey.Priority, s, "outside %d (first) to %d", keys.MinPriority, keys.MaxPriority)
		}
		v.Priority = n
	}
	if s, ok := ctrl[metakey.Group]; ok {
		if err := keys.ValidateGroup(s); err != nil {
			return fmt.Errorf("%s: %v", metakey.Group, err)
		}
		v.Group = s
	}
	if s, ok := ctrl[metakey.LimitKey]; ok {
		if err := keys.ValidateKeyText("limit key", s); err != nil {
			return fmt.Errorf("%s: %v", metakey.LimitKey, err)
		}
		v.LimitKey = s
	}
	if s, ok := ctrl[metakey.Retention]; ok {
		d, err := duration(metakey.Retention, s)
		if err != nil {
			return err
		}
		v.Retention, v.HasRetention = d, true
	}
	return nil
}

// readDebounce reads the three debounce keys, which go together.
func readDebounce(ctrl map[string]string, v *Values) error {
	key, hasKey := ctrl[metakey.DebounceKey]
	quietS, hasQuiet := ctrl[metakey.DebounceQuiet]
	maxS, hasMax := ctrl[metakey.DebounceMaxWait]
	switch {
	case !hasKey && !hasQuiet && !hasMax:
		return nil
	case !hasKey:
		return fmt.Errorf("%s and %s need %s", metakey.DebounceQuiet, metakey.DebounceMaxWait, metakey.DebounceKey)
	case !hasQuiet || !hasMax:
		return fmt.Errorf("%s needs %s and %s (say \"2s\" and \"1m\")", metakey.DebounceKey, metakey.DebounceQuiet, metakey.DebounceMaxWait)
	}
	if err := keys.ValidateKeyText("debounce key", key); err != nil {
		return fmt.Errorf("%s: %v", metakey.DebounceKey, err)
	}
	for _, k := range []string{metakey.Delay, metakey.RunAt, metakey.UniqueKey, metakey.Group} {
		if _, ok := ctrl[k]; ok {
			return fmt.Errorf("%s cannot be combined with %s (as WithDebounce)", metakey.DebounceKey, k)
		}
	}
	quiet, err := duration(metakey.DebounceQuiet, quietS)
	if err != nil {
		return err
	}
	if quiet == 0 || quiet > keys.MaxDebounceWait {
		return fmt.Errorf("%s %q: outside (0, %s]", metakey.DebounceQuiet, quietS, keys.MaxDebounceWait)
	}
	maxWait, err := duration(metakey.DebounceMaxWait, maxS)
	if err != nil {
		return err
	}
	if maxWait < quiet || maxWait > keys.MaxDebounceWait {
		return fmt.Errorf("%s %q: outside [%s %s, %s]", metakey.DebounceMaxWait, maxS, metakey.DebounceQuiet, quiet, keys.MaxDebounceWait)
	}
	v.DebounceKey, v.DebounceQuiet, v.DebounceMaxWait = key, quiet, maxWait
	return nil
}

// parseRunAt reads unix milliseconds (digits only) or an RFC 3339 time.
func parseRunAt(s string) (time.Time, error) {
	if s != "" && strings.Trim(s, "0123456789") == "" {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return time.Time{}, errors.New("unix milliseconds out of range")
		}
		return time.UnixMilli(ms), nil
	}
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, errors.New("neither unix milliseconds nor an RFC 3339 time")
	}
	return at, nil
}
