package periodic

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Spec is a parsed schedule: when its ticks fall. Every tick is a whole second. A tick's time
// depends on the spec alone, never on when or where it was computed. That is what lets every
// worker name a tick's job alike.
type Spec struct {
	every time.Duration // @every's interval; 0 for a cron spec
	cron  cron.Schedule
}

// parser reads robfig/cron/v3's syntax with an optional seconds field (so 5 or 6 fields),
// descriptors (@daily, @hourly, ...) and a leading CRON_TZ= (or TZ=) naming a time zone.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// MaxSpecLen bounds a spec's length: specs come from the HTTP API.
const MaxSpecLen = 256

// Parse reads a schedule spec. That is a cron expression of 5 fields (minute first) or 6 (second
// first), a descriptor such as @hourly, or "@every D". D is a Go duration of whole seconds, at
// least 1s.
//
// A cron spec is read in UTC unless it starts with CRON_TZ=Zone (or TZ=Zone). The default of
// robfig/cron is the process's local zone, which would make workers in different zones disagree
// on the ticks. "@every D" ticks at the multiples of D since the Unix epoch. (Robfig's @every
// counts from the time it is asked, which differs between workers.)
func Parse(spec string) (Spec, error) {
	if len(spec) > MaxSpecLen {
		return Spec{}, fmt.Errorf("spec longer than %d bytes", MaxSpecLen)
	}
	spec = strings.TrimSpace(spec)
	if rest, ok := strings.CutPrefix(spec, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return Spec{}, fmt.Errorf("spec %q: %w", spec, err)
		}
		if d < time.Second || d%time.Second != 0 {
			return Spec{}, fmt.Errorf("spec %q: the interval must be whole seconds, at least 1s", spec)
		}
		return Spec{every: d}, nil
	}
	if spec == "" {
		return Spec{}, errors.New("empty spec")
	}
	// The zone is added to what is parsed, not to what an error names: the user never typed it.
	zoned := spec
	if !strings.HasPrefix(spec, "CRON_TZ=") && !strings.HasPrefix(spec, "TZ=") {
		zoned = "CRON_TZ=UTC " + spec
	}
	s, err := parseCron(zoned)
	if err != nil {
		return Spec{}, fmt.Errorf("spec %q: %w", spec, err)
	}
	if _, ok := s.(cron.ConstantDelaySchedule); ok {
		// "CRON_TZ=... @every 1s": robfig's @every, which counts from when it is asked.
		return Spec{}, fmt.Errorf("spec %q: @every takes no time zone", spec)
	}
	return Spec{cron: s}, nil
}

// parseCron is robfig's Parse, which panics on some input (a "TZ=" with nothing after it,
// found by FuzzParse): specs come from the HTTP API.
func parseCron(spec string) (s cron.Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("unreadable spec: %v", r)
		}
	}()
	return parser.Parse(spec)
}

// Next is the first tick strictly after t, or the zero time when there is none. That is a cron
// spec that matches no date within robfig's five-year search, such as 30 February.
func (s Spec) Next(t time.Time) time.Time {
	if s.every > 0 {
		d := int64(s.every / time.Second)
		sec := t.Unix()
		// Floor division, for times before the epoch too.
		k := sec / d
		if sec%d != 0 && sec < 0 {
			k--
		}
		return time.Unix((k+1)*d, 0).UTC()
	}
	if s.cron == nil {
		return time.Time{}
	}
	n := s.cron.Next(t)
	if n.IsZero() {
		return n
	}
	return n.Truncate(time.Second)
}

// TickID is the job id of schedule name's tick at t: the same in every worker, so a tick
// enqueued twice makes one job (pipeline.WithID).
func TickID(name string, t time.Time) string {
	return fmt.Sprintf("cron:%s:%d", name, t.Unix())
}

// maxCount bounds Spec.count: a cron spec's ticks are counted one by one.
const maxCount = 100_000

// count is how many ticks fall in [from, to], at most maxCount.
func (s Spec) count(from, to time.Time) int {
	if to.Before(from) {
		return 0
	}
	if s.every > 0 {
		first := s.Next(from.Add(-time.Second))
		if first.After(to) {
			return 0
		}
		return int(min(int64(to.Sub(first)/s.every)+1, maxCount))
	}
	n := 0
	for t := s.Next(from.Add(-time.Second)); !t.IsZero() && !t.After(to) && n < maxCount; t = s.Next(t) {
		n++
	}
	return n
}
