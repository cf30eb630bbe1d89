package jobstate

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/script"
)

// Store is one deployment's job and queue state in Redis: the client, the key prefix and the
// cluster mode every script and read needs. Code outside this package reaches job or queue
// state through a Store's methods only (docs/ARCHITECTURE.md, "The store").
//
// Two settings are not fixed at construction, by design:
//   - The writer. Via returns a copy of the store that sends its writes through another client
//     (pipeline's replica writer, which adds a WAIT behind them). It is per call, because one
//     Client writes some publishes with replicas and others without.
//   - The events mode. Events detects it on first use and caches it per client
//     (events.ModeOf), because a store made while Redis is down must not fix "none" for good.
//     Calls that publish take it as a params field, as they did as free functions.
type Store struct {
	rdb     redis.UniversalClient // the writer: base, or what Via set
	base    redis.UniversalClient // the client the store was made with
	prefix  string
	cluster bool
}

// NewStore returns the store of the deployment under prefix on rdb.
func NewStore(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, base: rdb, prefix: prefix, cluster: script.IsCluster(rdb)}
}

// Via returns a copy of the store whose calls go through w (a wrapper of the store's client,
// such as a replica writer). The events mode stays the base client's.
func (s *Store) Via(w redis.UniversalClient) Backend { return s.via(w) }

func (s *Store) via(w redis.UniversalClient) *Store {
	if w == s.rdb {
		return s
	}
	c := *s
	c.rdb = w
	return &c
}

// Client is the store's Redis client, for the stream transport and the locks, which are not
// job state.
func (s *Store) Client() redis.UniversalClient { return s.base }

// Prefix is the store's key prefix.
func (s *Store) Prefix() string { return s.prefix }

// Cluster reports whether the client is a Redis Cluster client.
func (s *Store) Cluster() bool { return s.cluster }

// Events is the events mode of the store's server (events.ModeOf).
func (s *Store) Events(ctx context.Context) events.Mode { return events.ModeOf(ctx, s.base) }
