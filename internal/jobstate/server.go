package jobstate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

// Server is one Redis server behind a store: the store's own, or one master of a cluster. The
// doctor and the Redis page read a server's settings and state through it.
type Server struct {
	// Addr is the server's address; "" for a client of another kind, such as a Ring.
	Addr string
	c    redis.Cmdable
}

// Ping checks that Redis answers: it fails when Redis is unreachable or refuses the connection.
func (s *Store) Ping(ctx context.Context) error { return s.base.Ping(ctx).Err() }

// EachServer calls fn on each master of a cluster, concurrently, or on the store's one server.
// It returns the first error of fn, or of reaching the cluster's masters.
func (s *Store) EachServer(ctx context.Context, fn func(ctx context.Context, srv Server) error) error {
	if cc, ok := s.base.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return fn(ctx, Server{Addr: c.Options().Addr, c: c})
		})
	}
	srv := Server{c: s.base}
	if c, ok := s.base.(*redis.Client); ok {
		srv.Addr = c.Options().Addr
	}
	return fn(ctx, srv)
}

// StandaloneSeed returns a store on the first seed address of a cluster client, when that server
// answers and is no cluster node (INFO cluster says cluster_enabled:0). Else it returns nil. The
// doctor then checks the server itself, to say that --cluster is wrong. The caller calls closeSeed.
func (s *Store) StandaloneSeed(ctx context.Context) (seed *Store, closeSeed func() error) {
	cc, ok := s.base.(*redis.ClusterClient)
	if !ok {
		return nil, nil
	}
	o := cc.Options()
	if len(o.Addrs) == 0 {
		return nil, nil
	}
	c := redis.NewClient(&redis.Options{
		Addr: o.Addrs[0], Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig,
		Dialer: o.Dialer, Protocol: o.Protocol, DialTimeout: o.DialTimeout,
		ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout, MaxRetries: -1,
	})
	info, err := (Server{c: c}).Info(ctx, "cluster")
	if err != nil || info["cluster_enabled"] == "1" {
		_ = c.Close()
		return nil, nil
	}
	return NewStore(c, s.prefix), c.Close
}

// Info reads INFO's sections (its default set without any) as a map of its "field:value" lines.
func (v Server) Info(ctx context.Context, sections ...string) (map[string]string, error) {
	raw, err := v.c.Info(ctx, sections...).Result()
	if err != nil {
		return nil, err
	}
	return parseInfo(raw), nil
}

// parseInfo reads INFO's "field:value" lines; it skips the "# Section" headers.
func parseInfo(s string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(s) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}

// ConfigGet reads one configuration parameter (CONFIG GET): "" when the server has no such one.
func (v Server) ConfigGet(ctx context.Context, param string) (string, error) {
	cfg, err := v.c.ConfigGet(ctx, param).Result()
	if err != nil {
		return "", err
	}
	return cfg[param], nil
}

// Time reads the server's clock (TIME).
func (v Server) Time(ctx context.Context) (time.Time, error) { return v.c.Time(ctx).Result() }

// WhoAmI is the ACL user of the store's connection (ACL WHOAMI). A least-privilege user may be
// refused it: it is not in @connection.
func (s *Store) WhoAmI(ctx context.Context) (string, error) {
	return s.base.Do(ctx, "ACL", "WHOAMI").Text()
}

// Denial is a command that Redis does not let the store's user run.
type Denial struct {
	// Command is the command's name, as a worker sends it (XREADGROUP, EVALSHA).
	Command string
	// Reason is Redis's answer: ACL DRYRUN's text, or the NOPERM error.
	Reason string
}

// DryRunWorker asks ACL DRYRUN whether user may run each command a worker sends, on the store's
// keys and channels. It returns the commands denied. The error is Redis refusing ACL DRYRUN
// itself, which only an admin may run: then ProbeWorker is the fallback.
func (s *Store) DryRunWorker(ctx context.Context, user string) ([]Denial, error) {
	var denied []Denial
	for _, cmd := range workerCommands(s.prefix) {
		args := append([]any{"ACL", "DRYRUN", user}, toAny(cmd)...)
		res, err := s.base.Do(ctx, args...).Text()
		if err != nil {
			return nil, err
		}
		if res != "OK" {
			denied = append(denied, Denial{Command: cmd[0], Reason: res})
		}
	}
	return denied, nil
}

// ProbeWorker runs a few commands a worker sends that change nothing, or a key of their own
// that expires in a second. It returns those Redis refused for permission (NOPERM); other
// errors, such as a missing key's, say nothing about the ACL.
func (s *Store) ProbeWorker(ctx context.Context) []Denial {
	var denied []Denial
	q := keys.New(s.prefix, "doctor")
	probe := q.Job("probe") // a job key no job has: the SET below expires in a second
	for _, cmd := range [][]any{
		{"TIME"}, {"SMEMBERS", keys.Queues(s.prefix)}, {"XINFO", "GROUPS", probe},
		{"EVAL", "return 1", "1", probe}, {"SET", probe, "1", "PX", "1000"}, {"DEL", probe},
		{"PUBLISH", q.Wake(), "0"},
	} {
		if err := s.base.Do(ctx, cmd...).Err(); rediserr.IsNoPerm(err) {
			denied = append(denied, Denial{Command: fmt.Sprint(cmd[0]), Reason: ReplyText(err)})
		}
	}
	return denied
}

// ReplyText is the text of the Redis reply in err, or err's own text when it holds none.
func ReplyText(err error) string {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return rerr.Error()
	}
	return err.Error()
}

// workerCommands are the commands a worker (and the CLI) sends, as ACL DRYRUN checks them.
// Where a command takes a key or channel, it gets one of the prefix. These are those of a
// queue named "doctor", which nothing creates.
func workerCommands(prefix string) [][]string {
	q := keys.New(prefix, "doctor")
	key := q.Stream()
	return [][]string{
		{"PING"}, {"TIME"},
		{"EVALSHA", "0000000000000000000000000000000000000000", "1", key},
		{"SCRIPT", "LOAD", "return 1"},
		{"XREADGROUP", "GROUP", "g", "c", "STREAMS", key, ">"},
		{"XADD", key, "*", "f", "v"}, {"XACK", key, "g", "0-1"},
		{"XGROUP", "CREATE", key, "g", "$", "MKSTREAM"},
		{"XPENDING", key, "g"}, {"XAUTOCLAIM", key, "g", "c", "0", "0-0"}, {"XCLAIM", key, "g", "c", "0", "0-1"},
		{"XINFO", "GROUPS", key},
		{"HGETALL", key}, {"HSET", key, "f", "v"}, {"ZADD", key, "1", "m"}, {"ZRANGE", key, "0", "-1"},
		{"SADD", keys.Queues(prefix), "q"}, {"SMEMBERS", keys.Queues(prefix)},
		{"SET", key, "v", "PX", "1000", "NX"}, {"DEL", key}, {"PEXPIRE", key, "1000"},
		{"SUBSCRIBE", q.Wake()}, {"PUBLISH", q.Wake(), "0"},
		// The heartbeat and its listing.
		{"ZREMRANGEBYSCORE", keys.Workers(prefix), "-inf", "0"}, {"ZREM", keys.Workers(prefix), "m"},
		{"GET", keys.WorkerBeat(prefix, "doctor")}, {"PTTL", keys.WorkerBeat(prefix, "doctor")},
	}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
