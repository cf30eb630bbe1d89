package jobstate

import (
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/script"
)

// Store is one deployment's job and queue state in Redis: the client, the key prefix and the
// cluster mode every script and read needs. Code outside this package reaches job or queue
// state through a Store's methods only (docs/ARCHITECTURE.md, "The store").
type Store struct {
	rdb     redis.UniversalClient
	prefix  string
	cluster bool
}

// NewStore returns the store of the deployment under prefix on rdb.
func NewStore(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, prefix: prefix, cluster: script.IsCluster(rdb)}
}

// Client is the store's Redis client, for the stream transport and the locks, which are not
// job state.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Prefix is the store's key prefix.
func (s *Store) Prefix() string { return s.prefix }

// Cluster reports whether the client is a Redis Cluster client.
func (s *Store) Cluster() bool { return s.cluster }
