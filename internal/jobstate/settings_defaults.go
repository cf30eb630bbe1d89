package jobstate

import (
	"strconv"
	"time"
)

// The settings record's fields of a queue's job defaults: the retry count and the timeout of
// the jobs published without their own (pipeline.QueuePatch.MaxRetries, Timeout).
const (
	FieldMaxRetries = "max_retries"
	FieldTimeout    = "timeout_ms"
)

// JobDefaults are a queue's defaults for the jobs published without their own: nil and 0 are
// none.
type JobDefaults struct {
	MaxRetries *int
	Timeout    time.Duration
}

// ReadJobDefaults reads the defaults from a record's fields, keeping those within maxRetries
// and maxTimeout. A value that does not parse is no default: a publish must not fail over a
// setting.
func ReadJobDefaults(f map[string]string, maxRetries int, maxTimeout time.Duration) JobDefaults {
	var d JobDefaults
	if n, err := strconv.Atoi(f[FieldMaxRetries]); err == nil && n >= 0 && n <= maxRetries {
		d.MaxRetries = &n
	}
	if ms, err := strconv.ParseInt(f[FieldTimeout], 10, 64); err == nil && ms > 0 && ms <= maxTimeout.Milliseconds() {
		d.Timeout = time.Duration(ms) * time.Millisecond
	}
	return d
}

// JobDefaultsChange is the change of a record that sets the defaults given: a negative
// retry count or a zero timeout removes its default, nil leaves it. The timeout is kept in
// whole milliseconds, at least one. ok is false when nothing changes.
func JobDefaultsChange(maxRetries *int, timeout *time.Duration) (c SettingsChange, ok bool) {
	c.Set = map[string]string{}
	if n := maxRetries; n != nil && *n >= 0 {
		c.Set[FieldMaxRetries] = strconv.Itoa(*n)
	} else if n != nil {
		c.Delete = append(c.Delete, FieldMaxRetries)
	}
	if d := timeout; d != nil && *d > 0 {
		c.Set[FieldTimeout] = strconv.FormatInt(max(1, d.Milliseconds()), 10)
	} else if d != nil {
		c.Delete = append(c.Delete, FieldTimeout)
	}
	return c, len(c.Set)+len(c.Delete) > 0
}
