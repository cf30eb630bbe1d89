package redistest

import (
	"context"

	"github.com/conveyorq/conveyor/internal/redisproc"
)

// SlotMove says how MigrateSlot moves a slot's keys (see redisproc.SlotMove).
type SlotMove = redisproc.SlotMove

// MigrateSlot moves slot to the master at address to, as the Redis Cluster documentation's
// manual procedure does (CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE ... KEYS in batches,
// CLUSTER SETSLOT NODE). The procedure lives in redisproc, where the torture suite, which may
// not import a test helper, uses it too; see redisproc.MigrateSlot.
func MigrateSlot(ctx context.Context, addrs []string, slot int, to string, mv SlotMove) error {
	return redisproc.MigrateSlot(ctx, addrs, slot, to, mv)
}

// MigrateSlot is the package function MigrateSlot on this cluster's masters.
func (c *Cluster) MigrateSlot(ctx context.Context, slot int, to string, mv SlotMove) error {
	return MigrateSlot(ctx, c.Addrs, slot, to, mv)
}
