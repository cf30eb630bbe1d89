package jobstate

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
)

var (
	//go:embed admit.lua
	admitSrc    string
	admitScript = newScript(admitSrc)
)

// AdmitItem is one job a worker read and holds the stream entry of, to admit before its
// handler runs. It has the job's id, entry and type, and the attempt the entry starts. It
// also has its limit key (the entry's keys.EntryLimitKey). Fence asks admit.lua to check that the job is still live before
// granting it (a job asked about again after a lost reply, which may have been deferred).
type AdmitItem struct {
	ID, Entry, Type string
	Attempt         int
	LimitKey        string
	Fence           bool
}

// LeaseRequest asks admit.lua for more of one scope instance's limits (LimitInstance) for a
// worker session. It asks for the slot numbers Names, granted in order as far as the
// concurrency has room. It also asks for Tokens rate tokens. These go with the SlotsAside and
// TokensAside the worker already holds and sets aside for the call's jobs.
type LeaseRequest struct {
	Inst        string
	Names       []int
	SlotsAside  int
	Tokens      int
	TokensAside int
}

// LeaseGrant is what admit.lua granted of a LeaseRequest: the first Names slot numbers asked
// for, and Tokens tokens; Waiting says jobs wait in Redis for a slot of the instance.
type LeaseGrant struct {
	Names, Tokens int
	Waiting       bool
}

// Admission is admit.lua's answer for one job: Code script.OK (granted: run it on the
// worker's leases), script.Deferred (over a limit: the job is scheduled again and its entry
// gone, so the worker settles the message without running it; Due is when a rate frees, zero
// when it waits for a concurrency slot) or script.Refused (the job moved on; nothing to run).
type Admission struct {
	Code script.Code
	Due  time.Time
}

// AdmitResult is an admitCall's reply. Lost says the holder's lease had run out, so what it
// held before is gone. Stamp is the call's time by Redis's clock; the rate tokens it granted
// are given back by it (TokenReturn). Then come a grant per request and an answer per item,
// in order.
type AdmitResult struct {
	Lost   bool
	Stamp  string
	Grants []LeaseGrant
	Jobs   []Admission
}

// Holder is one worker session's name in the lease records. Lease is how long its leases last
// unrenewed; a dead worker's slots come back after it. Known says whether a call of it went
// through before. TokenLife is how long after it sent a call it may start a job on a rate
// token the call granted. After that it gives the token back. A rate counts such a token from
// then, so that its bound holds for starts.
type Holder struct {
	Name      string
	Lease     time.Duration
	Known     bool
	TokenLife time.Duration
}

// admitCall is one admit.lua call of holder h on queue q: the lease requests reqs, then items,
// all of q, to hold to q's limits.
func admitCall(q *keys.Queue, h Holder, reqs []LeaseRequest, items []AdmitItem) script.Call {
	ks := make([]string, 0, 4+len(items))
	ks = append(ks, q.Stream(), q.Scheduled(), q.Stats(), q.Limits())
	args := make([]any, 0, 8+5*len(reqs)+6*len(items))
	known := ""
	if h.Known {
		known = "1"
	}
	args = append(args, keys.Group, q.LimitPrefix(), q.Wake(), q.JobPrefix(), h.Name,
		strconv.FormatInt(max(h.Lease.Milliseconds(), 1), 10), known, strconv.Itoa(len(reqs)),
		strconv.FormatInt(max(h.TokenLife.Microseconds(), 0), 10))
	for _, r := range reqs {
		args = append(args, r.Inst, joinNumbers(r.Names), strconv.Itoa(r.SlotsAside),
			strconv.Itoa(r.Tokens), strconv.Itoa(r.TokensAside))
	}
	for i := range items {
		it := &items[i]
		ks = append(ks, q.Job(it.ID))
		fence := ""
		if it.Fence {
			fence = "1"
		}
		args = append(args, it.ID, it.Entry, it.Type, strconv.Itoa(it.Attempt), it.LimitKey, fence)
	}
	return script.Call{Script: admitScript, Keys: ks, Args: args}
}

// joinNumbers is ns ','-joined.
func joinNumbers(ns []int) string {
	b := make([]byte, 0, 4*len(ns))
	for k, n := range ns {
		if k > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(n), 10)
	}
	return string(b)
}

// admitReply reads the reply of an admitCall of nreq requests and n items.
func admitReply(cmd *redis.Cmd, nreq, n int) (AdmitResult, error) {
	r, err := decode("admit", cmd)
	if err == nil {
		err = r.want(2 + 3*nreq + 2*n)
	}
	if err != nil {
		return AdmitResult{}, err
	}
	res := AdmitResult{Lost: r.int(0) == 1, Stamp: r.str(1), Grants: make([]LeaseGrant, nreq), Jobs: make([]Admission, n)}
	for k := range res.Grants {
		res.Grants[k] = LeaseGrant{Names: int(r.int(2 + 3*k)), Tokens: int(r.int(3 + 3*k)), Waiting: r.int(4+3*k) == 1}
	}
	base := 2 + 3*nreq
	for k := range res.Jobs {
		a := &res.Jobs[k]
		a.Code = script.Code(r.int(base + 2*k))
		switch a.Code {
		case script.OK, script.Refused:
		case script.Deferred:
			if s := r.str(base + 2*k + 1); s != "" {
				ms, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return AdmitResult{}, fmt.Errorf("admit: due time %q: %w", s, err)
				}
				a.Due = time.UnixMilli(ms)
			}
		default:
			return AdmitResult{}, fmt.Errorf("admit: unexpected reply code %v", a.Code)
		}
	}
	return res, nil
}

var (
	//go:embed leases.lua
	leasesSrc    string
	leasesScript = newScript(leasesSrc)
)

// LeaseReturn gives back part of a worker session's lease of one scope instance: the slot
// numbers Names and the unused rate tokens Tokens. Forget says the session holds nothing of
// the instance any more, so that its lease record forgets it.
type LeaseReturn struct {
	Inst   string
	Names  []int
	Tokens []TokenReturn
	Forget bool
}

// TokenReturn is N unused rate tokens of the admit.lua call whose AdmitResult.Stamp is Stamp:
// a rate counts its grants by when they were made, so a token goes back by its grant's time.
type TokenReturn struct {
	Stamp string
	N     int
}

// joinTokens is ts as leases.lua reads them: '<stamp>:<count>' pairs, ','-joined.
func joinTokens(ts []TokenReturn) string {
	var b strings.Builder
	for _, t := range ts {
		if t.N <= 0 || t.Stamp == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(t.Stamp)
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(t.N))
	}
	return b.String()
}

// leasesCall is one leases.lua call of holder h on queue q. It gives back rets and renews h's
// lease. When end is true it gives back every slot h holds and ends its lease instead. It
// also takes back the slots of holders whose lease ran out.
func leasesCall(q *keys.Queue, h Holder, end bool, rets []LeaseReturn) script.Call {
	lease := strconv.FormatInt(max(h.Lease.Milliseconds(), 1), 10)
	if end {
		lease = "0"
	}
	args := make([]any, 0, 4+4*len(rets))
	args = append(args, q.LimitPrefix(), q.JobPrefix(), h.Name, lease)
	for _, r := range rets {
		forget := ""
		if r.Forget {
			forget = "1"
		}
		args = append(args, r.Inst, joinNumbers(r.Names), joinTokens(r.Tokens), forget)
	}
	return script.Call{Script: leasesScript, Keys: []string{q.Stream(), q.Limits()}, Args: args}
}

// leasesReply reads a leasesCall's reply: whether h's lease had run out (lost: its slots were
// taken back), and the instances h has slots of that jobs wait for.
func leasesReply(cmd *redis.Cmd) (lost bool, waiting []string, err error) {
	r, err := decode("leases", cmd)
	if err == nil && (r.code != script.OK || len(r.rest) < 1) {
		err = r.unexpected()
	}
	if err != nil {
		return false, nil, err
	}
	return r.int(0) == 1, r.strs(1), nil
}

// AdmitParams is one admit.lua call of Holder on Queue: the lease requests Reqs, then Items,
// all of Queue, to hold to its limits.
type AdmitParams struct {
	Queue  *keys.Queue
	Holder Holder
	Reqs   []LeaseRequest
	Items  []AdmitItem
}

// Admit runs one admit.lua call.
func (s *Store) Admit(ctx context.Context, p AdmitParams) (AdmitResult, error) {
	c := admitCall(p.Queue, p.Holder, p.Reqs, p.Items)
	return admitReply(c.Script.Run(ctx, s.rdb, c.Keys, c.Args...), len(p.Reqs), len(p.Items))
}

// LeasesParams is one leases.lua call of Holder on Queue. It gives back Returns and renews
// the holder's lease. With End it gives back every slot it holds and ends its lease instead.
// It also takes back the slots of holders whose lease ran out.
type LeasesParams struct {
	Queue   *keys.Queue
	Holder  Holder
	End     bool
	Returns []LeaseReturn
}

// Leases runs one leases.lua call: whether the holder's lease had run out (lost: its slots
// were taken back), and the instances it has slots of that jobs wait for.
func (s *Store) Leases(ctx context.Context, p LeasesParams) (lost bool, waiting []string, err error) {
	c := leasesCall(p.Queue, p.Holder, p.End, p.Returns)
	return leasesReply(c.Script.Run(ctx, s.rdb, c.Keys, c.Args...))
}

// LimitInstance names the scope instance of limit field (LimitField) that holds a job of type
// typ and limit key key (per-key fields only hold jobs with a key), as admit.lua names it.
func LimitInstance(field, typ, key string) string {
	switch {
	case field == "q":
		return "q"
	case field == "qk":
		return "qk:" + key
	case strings.HasPrefix(field, "tk:"):
		return field + " " + key
	default:
		return field
	}
}
