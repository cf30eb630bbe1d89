package periodic

import (
	"context"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/metakey"
)

// What pipeline.Inspector's schedule calls need beyond the Store. Names are checked before
// Redis is asked; a listed schedule has its next run; a tick's job has its metadata. pipeline
// converts its types and errors around these calls and keeps nothing else.

// NameError is the error about a schedule name, or a listing's cursor, that is no valid name.
type NameError struct{ Err error }

func (e *NameError) Error() string { return e.Err.Error() }
func (e *NameError) Unwrap() error { return e.Err }

// checkName checks name before a call of it reaches Redis.
func checkName(name string) error {
	if err := keys.ValidateSchedule(name); err != nil {
		return &NameError{err}
	}
	return nil
}

// GetNamed is Get of a name checked first (NameError).
func (s *Store) GetNamed(ctx context.Context, name string) (Schedule, error) {
	if err := checkName(name); err != nil {
		return Schedule{}, err
	}
	return s.Get(ctx, name)
}

// DeleteNamed is Delete of a name checked first (NameError).
func (s *Store) DeleteNamed(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	return s.Delete(ctx, name)
}

// SetPaused pauses or resumes (at now) schedule name, checked first (NameError).
func (s *Store) SetPaused(ctx context.Context, name string, pause bool, now time.Time) error {
	if err := checkName(name); err != nil {
		return err
	}
	if pause {
		return s.Pause(ctx, name)
	}
	return s.Resume(ctx, name, now)
}

// PageAfter is Page with a cursor checked first: a cursor that is no schedule's name is a
// NameError.
func (s *Store) PageAfter(ctx context.Context, cursor string, limit int) ([]Schedule, string, error) {
	if cursor != "" {
		if err := keys.ValidateSchedule(cursor); err != nil {
			return nil, "", &NameError{fmt.Errorf("cursor %q is not one of a schedules listing", cursor)}
		}
	}
	return s.Page(ctx, cursor, limit)
}

// NextRun is the schedule's next tick due: in the past while a tick is overdue. It is zero for
// a paused schedule, one with no state yet, and a spec with no more ticks.
func (sc Schedule) NextRun() time.Time {
	if sc.Paused || sc.State.Last.IsZero() {
		return time.Time{}
	}
	spec, err := Parse(sc.Spec)
	if err != nil {
		return time.Time{}
	}
	return spec.Next(sc.State.Last)
}

// MissedPolicy is the schedule's missed policy, MissedSkip when none is stored.
func (d Def) MissedPolicy() string {
	if d.Missed == "" {
		return MissedSkip
	}
	return d.Missed
}

// Metadata is the metadata of the job of d's tick; missed marks the one job that stands for
// missed ticks.
func Metadata(d Def, tick time.Time, missed bool) map[string]string {
	md := map[string]string{metakey.Schedule: d.Name, metakey.ScheduleTick: tick.UTC().Format(time.RFC3339)}
	if missed {
		md[metakey.ScheduleMissed] = "true"
	}
	return md
}
