package redisproc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// migrateTimeout is MIGRATE's timeout (ms) for one batch of keys.
const migrateTimeout = 5000

// settleTimeout bounds the wait until every master agrees on a moved slot's owner.
const settleTimeout = 30 * time.Second

// SlotMove says how MigrateSlot moves a slot's keys.
type SlotMove struct {
	// Batch is the most keys one MIGRATE ... KEYS call moves (default 10). 0 or less means the
	// default. A Batch of at least the slot's key count moves them all in one call. The mover
	// still loops until CLUSTER GETKEYSINSLOT finds none left.
	Batch int
	// Between, if set, runs after each batch while the slot is half-moved: IMPORTING on the
	// target, MIGRATING on the source, some keys on each. It is a test's work, or a wait for it.
	// It gets the number of keys moved so far. An error stops the move with the slot left
	// half-moved. The caller may finish it with another MigrateSlot to the same target.
	Between func(ctx context.Context, moved int) error
}

// MigrateSlot moves slot to the master at address to, as the Redis Cluster documentation's
// manual procedure does (CLUSTER SETSLOT). It sets IMPORTING on the target first, then MIGRATING
// on the source. Then it runs CLUSTER GETKEYSINSLOT and MIGRATE ... KEYS in batches until the
// source holds none of the slot's keys. Then it sends CLUSTER SETSLOT <slot> NODE <target> to
// the target, the source and every other master. addrs are the cluster's masters. Any that reach
// it will do, since the others are learnt from CLUSTER NODES. A slot the target already owns is
// a no-op.
//
// MIGRATE is sent without REPLACE. A key may exist on both nodes, written on the target through
// ASK while the source still had it. That fails the move with BUSYKEY, which is what a test
// wants to see. Without --cluster-replace, redis-cli --cluster reshard does the same.
func MigrateSlot(ctx context.Context, addrs []string, slot int, to string, mv SlotMove) error {
	if slot < 0 || slot > 16383 {
		return fmt.Errorf("redisproc: slot %d out of range", slot)
	}
	if mv.Batch <= 0 {
		mv.Batch = 10
	}
	if len(addrs) == 0 {
		return errors.New("redisproc: no cluster address")
	}
	seed := redis.NewClient(&redis.Options{Addr: addrs[0], MaxRetries: -1})
	defer seed.Close()
	masters, owner, err := SlotOwner(ctx, seed, slot)
	if err != nil {
		return err
	}
	targetID, ok := masters[to]
	if !ok {
		return fmt.Errorf("redisproc: %s is not a master of the cluster (masters %v)", to, masters)
	}
	if owner == to {
		return nil
	}
	sourceID := masters[owner]
	clients := make(map[string]*redis.Client, len(masters))
	for addr := range masters {
		clients[addr] = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		defer clients[addr].Close()
	}
	src, dst := clients[owner], clients[to]
	host, port, err := splitAddr(to)
	if err != nil {
		return err
	}

	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", sourceID).Err(); err != nil {
		return fmt.Errorf("redisproc: %s: CLUSTER SETSLOT %d IMPORTING: %w", to, slot, err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", targetID).Err(); err != nil {
		return fmt.Errorf("redisproc: %s: CLUSTER SETSLOT %d MIGRATING: %w", owner, slot, err)
	}
	moved := 0
	for {
		ks, err := src.ClusterGetKeysInSlot(ctx, slot, mv.Batch).Result()
		if err != nil {
			return fmt.Errorf("redisproc: %s: CLUSTER GETKEYSINSLOT %d: %w", owner, slot, err)
		}
		if len(ks) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, migrateTimeout, "KEYS"}
		for _, k := range ks {
			args = append(args, k)
		}
		if err := src.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("redisproc: %s: MIGRATE of %d keys of slot %d to %s: %w (keys %q)", owner, len(ks), slot, to, err, ks)
		}
		moved += len(ks)
		if mv.Between != nil {
			if err := mv.Between(ctx, moved); err != nil {
				return err
			}
		}
	}
	// The documented order. The target goes first, so that it stops answering ASK-only. Then the
	// source, which from then on answers MOVED. Then the rest, which would learn it by gossip.
	order := []string{to, owner}
	for addr := range masters {
		if addr != to && addr != owner {
			order = append(order, addr)
		}
	}
	for _, addr := range order {
		if err := clients[addr].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", targetID).Err(); err != nil {
			return fmt.Errorf("redisproc: %s: CLUSTER SETSLOT %d NODE: %w", addr, slot, err)
		}
	}
	return waitSlotOwner(ctx, clients, slot, to)
}

// SlotOwner reads CLUSTER NODES from seed: every master's address and node id, and the
// address of the master that owns slot.
func SlotOwner(ctx context.Context, seed *redis.Client, slot int) (map[string]string, string, error) {
	out, err := seed.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, "", fmt.Errorf("redisproc: CLUSTER NODES: %w", err)
	}
	masters := map[string]string{}
	owner := ""
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		// <id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> <slot> ...
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") { // a failed master answers nothing
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		masters[addr] = f[0]
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") { // a migrating or importing mark, not an owned range
				continue
			}
			lo, hi, found := strings.Cut(r, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if found {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 == nil && err2 == nil && a <= slot && slot <= b {
				owner = addr
			}
		}
	}
	if owner == "" {
		return nil, "", fmt.Errorf("redisproc: no master owns slot %d", slot)
	}
	return masters, owner, nil
}

// waitSlotOwner waits until every master's CLUSTER NODES names to as slot's owner with no
// migration mark left, so that the caller's next command sees the settled cluster.
func waitSlotOwner(ctx context.Context, clients map[string]*redis.Client, slot int, to string) error {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	for {
		settled := true
		for _, c := range clients {
			_, owner, err := SlotOwner(ctx, c, slot)
			out, err2 := c.ClusterNodes(ctx).Result()
			if err != nil || err2 != nil || owner != to || strings.Contains(out, "["+strconv.Itoa(slot)+"-") {
				settled = false
				break
			}
		}
		if settled {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redisproc: slot %d not settled on %s: %w", slot, to, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func splitAddr(addr string) (string, int, error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", 0, fmt.Errorf("redisproc: address %q has no port", addr)
	}
	port, err := strconv.Atoi(addr[i+1:])
	if err != nil {
		return "", 0, fmt.Errorf("redisproc: address %q: %w", addr, err)
	}
	return addr[:i], port, nil
}
