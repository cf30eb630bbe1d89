package api

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/conveyorq/conveyor/pipeline"
)

// sightingsTTL is how long the server answers publishes from one read of the workers'
// sightings (pipeline.Inspector.Sightings): a burst of publishes costs one read, not one per
// request. The window they are checked over is minutes, so seconds of staleness change
// nothing but the first publishes after a queue's first worker starts.
const sightingsTTL = 5 * time.Second

// sightingsReadTimeout bounds the read: a publish that succeeded is not held up for its
// warnings, which it goes without when Redis is slow.
const sightingsReadTimeout = time.Second

// sightingsCache is the last read of the workers' sightings, shared by every publish.
type sightingsCache struct {
	read func(context.Context) (pipeline.Sightings, error)
	now  func() time.Time // the server's clock, monotonic; tests replace it

	// mu is held across a read, so that the requests that find the cache stale wait for one
	// read rather than each sending its own.
	mu  sync.Mutex
	at  time.Time // when s (or err) was read, by now
	s   pipeline.Sightings
	err error
}

// get returns the sightings as of now: those of the last read, younger than sightingsTTL, with
// Redis's clock moved on by the time since; else a new read. A failed read is kept as long, so
// that an outage costs one read every few seconds, not one a publish.
func (c *sightingsCache) get(ctx context.Context) (pipeline.Sightings, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if c.at.IsZero() || now.Sub(c.at) >= sightingsTTL {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sightingsReadTimeout)
		c.s, c.err = c.read(rctx)
		cancel()
		c.at = now
	}
	s := c.s
	s.Now = s.Now.Add(now.Sub(c.at))
	return s, c.err
}

// publishWarnings are the warnings of a publish of types to queue that succeeded
// (pipeline.Inspector.PublishWarnings), set as Warning headers. Without the workers'
// sightings there are none: a warning is a hint, and the publish has been made.
func (s *Server) publishWarnings(w http.ResponseWriter, r *http.Request, queue string, types ...string) []string {
	seen, err := s.sightings.get(r.Context())
	if err != nil {
		s.log.Debug().Err(err).Str("queue", queue).Msg("cannot read the workers' sightings; the publish goes without warnings")
		return nil
	}
	warnings := seen.PublishWarnings(queue, types...)
	for _, text := range warnings {
		w.Header().Add("Warning", warningValue(text))
	}
	return warnings
}

// warningValue is a Warning header's value (RFC 7234, section 5.5): code 199, "miscellaneous
// warning", agent conveyor, and text as a quoted-string. The texts name queues and types,
// whose characters are checked at publish, but any control character is made a space all the
// same, so that no text can break the header.
func warningValue(text string) string {
	var b strings.Builder
	b.WriteString(`199 conveyor "`)
	for _, c := range []byte(text) {
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			b.WriteByte(' ')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
