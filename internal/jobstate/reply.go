package jobstate

import (
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/script"
)

// Every script of this package answers {code, ...}: a script.Code, then what the script says
// with it. decode is the one reader of that shape. Each call's own reader (finishReply,
// enqueueReply, Cancel, Promote, ...) names the parts. So a caller never sees the raw reply.

// reply is a script's reply split into its code and the rest.
type reply struct {
	op   string // the call, for errors
	code script.Code
	rest []any
}

// decode splits cmd's reply. A failure of Redis (of the call, not of its reply's shape) is
// returned as rediserr.Wrap(op, err). So op must be one of the short stable operation names
// the API and the CLI show (rediserr.Error.Op). cmd.Slice hands back the reply as go-redis
// parsed it, without a copy. So reading a reply costs no allocation of its own; the worker
// reads one per chunk.
func decode(op string, cmd *redis.Cmd) (reply, error) {
	v, err := cmd.Slice()
	if err != nil {
		return reply{}, rediserr.Wrap(op, err)
	}
	if len(v) == 0 {
		return reply{}, fmt.Errorf("%s: script reply without a code", op)
	}
	c, ok := v[0].(int64)
	if !ok {
		return reply{}, fmt.Errorf("%s: script reply code %v is not a number", op, v[0])
	}
	return reply{op: op, code: script.Code(c), rest: v[1:]}, nil
}

// want reports an error unless the reply is script.OK followed by n values.
func (r *reply) want(n int) error {
	if r.code != script.OK || len(r.rest) != n {
		return r.unexpected()
	}
	return nil
}

// unexpected is the error of a reply its reader does not understand.
func (r *reply) unexpected() error {
	return fmt.Errorf("%s: unexpected reply %v %v", r.op, r.code, r.rest)
}

// int is the i-th value after the code as a number (0 when it is not one).
func (r *reply) int(i int) int64 {
	n, _ := r.rest[i].(int64)
	return n
}

// str is the i-th value after the code as a string ("" when it is not one).
func (r *reply) str(i int) string {
	s, _ := r.rest[i].(string)
	return s
}

// strs is the values after the code from i on, as strings.
func (r *reply) strs(i int) []string {
	out := make([]string, len(r.rest)-i)
	for k := range out {
		out[k] = r.str(i + k)
	}
	return out
}

// Row is a script's answer about one item: a code and what the script says with it. That is
// a status, an entry id, or the id of a job that holds a unique key. It is empty when the
// script says nothing.
type Row struct {
	Code script.Code
	Data string
}

// decodeRow reads a reply of one Row: {code} or {code, data}.
func decodeRow(op string, cmd *redis.Cmd) (Row, error) {
	r, err := decode(op, cmd)
	if err != nil {
		return Row{}, err
	}
	row := Row{Code: r.code}
	if len(r.rest) > 0 {
		row.Data = r.str(0)
	}
	return row, nil
}

// ErrLockLost is what a fenced maintenance call (Recover, Prune) returns when the queue's
// recovery lock no longer holds the caller's token: nothing was changed.
var ErrLockLost = errors.New("the recovery lock no longer holds the caller's token")
