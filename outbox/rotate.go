package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/conveyorq/conveyor/keyring"
)

// DefaultRotateBatch is Rotate's batch when it is given 0: rows read and written in one
// transaction.
const DefaultRotateBatch = 100

// RotateReport counts what Rotate did to the outbox's rows.
type RotateReport struct {
	// Resealed rows' payloads were under an older key and are now under the newest.
	Resealed int `json:"resealed"`
	// Sealed rows' payloads were plain and are now sealed.
	Sealed int `json:"sealed"`
	// Current rows' payloads were under the newest key already: not written.
	Current int `json:"current"`
	// Failed rows' payloads could not be opened: sealed under a key the keyring lacks
	// (MissingKeys), or damaged.
	Failed int `json:"failed"`
	// MissingKeys are the ids of the keys rows were sealed under that the keyring lacks.
	MissingKeys []string `json:"missing_keys,omitempty"`
}

const rotateSelect = `SELECT seq, id, payload FROM ` + Table + `
WHERE seq > $1 AND seq <= $3 ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED`

// rotateLast is the last row written when a rotation begins: the last it reads.
const rotateLast = `SELECT coalesce(max(seq), 0) FROM ` + Table

const rotateUpdate = `UPDATE ` + Table + ` SET payload = $2 WHERE id = $1`

// Rotate re-seals the payloads of the outbox's rows under k's newest key (a plain payload is
// sealed; one under the newest key is left alone), batch rows a transaction (0:
// DefaultRotateBatch), in the order they were written. Each batch locks its rows FOR UPDATE
// SKIP LOCKED, so a rotation never waits for the relay nor makes it wait: a row the relay holds
// is skipped, sent as it is, and re-sealed in Redis by the next pipeline.Inspector.RotateKeys.
// A batch commits before the next begins, so an interruption loses only the batch in flight,
// and a rerun goes over the rows left at the cost of a read. Rows written after it began are
// not read: a producer given k seals them already, and a rotation under a load that writes
// rows faster than it re-seals them still ends (a producer still on an older key is caught by
// the next run).
func Rotate(ctx context.Context, db *sql.DB, k *keyring.Keyring, batch int) (RotateReport, error) {
	var rep RotateReport
	if k == nil {
		return rep, errors.New("outbox: rotate: no keyring")
	}
	if batch <= 0 {
		batch = DefaultRotateBatch
	}
	var until int64
	if err := db.QueryRowContext(ctx, rotateLast).Scan(&until); err != nil {
		return rep, fmt.Errorf("outbox: rotate: %w", noTable(err))
	}
	var after int64
	for {
		n, last, err := rotateBatch(ctx, db, k, after, until, batch, &rep)
		if err != nil {
			return rep, fmt.Errorf("outbox: rotate: %w", noTable(err))
		}
		if n < batch {
			return rep, nil
		}
		after = last
	}
}

// rotateBatch re-seals the rows after seq after and up to until, at most batch, in one
// transaction. It returns how many it read and the last one's seq.
func rotateBatch(ctx context.Context, db *sql.DB, k *keyring.Keyring, after, until int64, batch int, rep *RotateReport) (int, int64, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, rotateSelect, after, batch, until)
	if err != nil {
		return 0, 0, err
	}
	type change struct {
		id      string
		payload []byte
	}
	var changes []change
	var sealed []bool
	n, last := 0, after
	for rows.Next() {
		var id string
		var payload []byte
		if err := rows.Scan(&last, &id, &payload); err != nil {
			_ = rows.Close()
			return 0, 0, err
		}
		n++
		if len(payload) == 0 {
			continue
		}
		out, changed, err := k.Reseal(keyring.Payload, id, payload)
		switch {
		case err != nil:
			rep.Failed++
			var ke *keyring.KeyError
			if errors.As(err, &ke) && !slices.Contains(rep.MissingKeys, ke.KeyID) {
				rep.MissingKeys = append(rep.MissingKeys, ke.KeyID)
				slices.Sort(rep.MissingKeys)
			}
		case !changed:
			rep.Current++
		default:
			changes = append(changes, change{id, out})
			sealed = append(sealed, !keyring.Sealed(payload))
		}
	}
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	for _, c := range changes {
		if _, err := tx.ExecContext(ctx, rotateUpdate, c.id, c.payload); err != nil {
			return 0, 0, err
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, 0, err
	}
	for _, s := range sealed {
		if s {
			rep.Sealed++
		} else {
			rep.Resealed++
		}
	}
	return n, last, nil
}
