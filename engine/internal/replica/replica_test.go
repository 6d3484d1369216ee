package replica

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/snapfence/snapfence/engine/internal/core"
	"github.com/snapfence/snapfence/store"
)

// The copy of a standby replica, a view and a table is a partition's core.
var _ Copy = (*core.Core[int, int])(nil)

// The Reader's tests are scripts under testdata, one command a step, each
// followed by what it answered and where the Reader, the copy and the
// store's followers are after it. Rewrite them after an intended change
// with
//
//	go test ./engine/internal/replica -rewrite
//
// and review the diff. The commands:
//
//	new                        a Reader (a restart: the last one is closed,
//	                           the copy stays), the clock at 0
//	append k=v...              records appended to the partition, committed
//	                           (k= : a tombstone of k)
//	store refuse=R | accept    the store refuses every checkpoint (reason R),
//	                           or checks only that it is within the log
//	fail C                     the next call C fails: follow, next, hw (the
//	                           store's), checkpoint, drop, apply (the copy's)
//	copy checkpoint=S          the copy's checkpoint is S (tag@offset)
//	open [at=D]                Open
//	read [at=D] [batch=N] [canceled]
//	                           Read; batch: the follower returns at most N
//	                           records; canceled: ctx ends during the read
//	hw                         HighWatermark
//	fail-caller err=E [at=D]   the caller fails the Reader (Fail)
//	close                      Close
func TestReaderScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := &harness{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out, err := h.step(d)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			return out
		})
	})
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// tag is the tag of the Reader's checkpoints.
const tag = "replica"

type harness struct {
	now   time.Time
	st    *fakeStore
	copy  *fakeCopy
	r     *Reader
	batch int // the next Next's bound; 0: none
}

func (h *harness) step(d *datadriven.TestData) (string, error) {
	args := map[string]string{}
	var keys []string
	for _, a := range d.CmdArgs {
		args[a.Key] = strings.Join(a.Vals, ",")
		keys = append(keys, a.Key)
	}
	if at, ok := args["at"]; ok {
		dur, err := time.ParseDuration(at)
		if err != nil {
			return "", err
		}
		h.now = epoch.Add(dur)
	}
	if d.Cmd != "new" && h.r == nil {
		return "", errors.New("new first")
	}
	var b strings.Builder
	if err := h.run(d, args, keys, &b); err != nil {
		return "", err
	}
	h.describe(&b)
	return b.String(), nil
}

func (h *harness) run(d *datadriven.TestData, args map[string]string, keys []string, b *strings.Builder) error {
	ctx := context.Background()
	switch d.Cmd {
	case "new":
		return h.newReader(args)
	case "append":
		for _, a := range d.CmdArgs {
			h.st.append(a.Key, strings.Join(a.Vals, ","))
		}
	case "store":
		h.st.refuse = args["refuse"]
	case "fail":
		for _, k := range keys {
			switch k {
			case "follow", "next", "hw":
				h.st.fail[k] = true
			case "checkpoint", "drop", "apply":
				h.copy.fail[k] = true
			default:
				return fmt.Errorf("unknown call %q", k)
			}
		}
	case "copy":
		h.copy.checkpoint = []byte(args["checkpoint"])
	case "open":
		o, err := h.r.Open(ctx, h.copy)
		describeOpened(b, o, err)
	case "read":
		return h.read(ctx, args, b)
	case "hw":
		hw, err := h.r.HighWatermark(ctx)
		fmt.Fprintf(b, "high watermark %d, err %v\n", hw, err)
	case "fail-caller":
		fmt.Fprintf(b, "fail: %v\n", h.r.Fail(errors.New(args["err"])))
	case "close":
		h.r.Close()
	default:
		return fmt.Errorf("unknown command %q", d.Cmd)
	}
	return nil
}

func (h *harness) newReader(args map[string]string) error {
	if h.r != nil {
		h.r.Close() // a restart: the copy stays
	}
	if h.st == nil {
		h.st = &fakeStore{fail: map[string]bool{}, h: h}
		h.copy = &fakeCopy{states: map[string]string{}, fail: map[string]bool{}}
	}
	h.now = epoch
	h.r = New(Config{Follow: h.st.follow, Checkpoints: tagged{}})
	return nil
}

func (h *harness) read(ctx context.Context, args map[string]string, b *strings.Builder) error {
	h.batch = 0
	if n, ok := args["batch"]; ok {
		var err error
		if h.batch, err = strconv.Atoi(n); err != nil {
			return err
		}
	}
	if _, ok := args["canceled"]; ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		cancel()
	}
	snaps, err := h.r.Read(ctx, 0)
	var read []string
	for _, s := range snaps {
		read = append(read, describeSnapshot(s))
	}
	fmt.Fprintf(b, "read [%s]", strings.Join(read, " "))
	if err != nil {
		fmt.Fprintf(b, ", err %v", err)
	}
	b.WriteString("\n")
	return nil
}

func describeOpened(b *strings.Builder, o Opened, err error) {
	switch {
	case err != nil:
		fmt.Fprintf(b, "open failed: %v", err)
	case o.From != nil:
		fmt.Fprintf(b, "opened from checkpoint %d", o.From.Offset)
	default:
		b.WriteString("opened from the log start")
	}
	if o.Refused != nil {
		fmt.Fprintf(b, " (checkpoint refused: %s)", o.Refused.Reason)
	}
	b.WriteString("\n")
}

// describe writes where the Reader, the copy and the store are.
func (h *harness) describe(b *strings.Builder) {
	s := h.r.Status()
	if s.Following {
		fmt.Fprintf(b, "reader: following from %d, position %d, log end %d, lag %d, read %d, vouched %v\n",
			s.From, s.Position, s.LogEnd, s.Lag, s.Read, s.Vouched)
	} else if s.Err != nil {
		fmt.Fprintf(b, "reader: failed [%v]\n", s.Err)
	} else {
		b.WriteString("reader: not following\n")
	}
	var states []string
	for _, k := range slices.Sorted(maps.Keys(h.copy.states)) {
		states = append(states, k+"="+h.copy.states[k])
	}
	fmt.Fprintf(b, "copy: [%s] checkpoint %q\n", strings.Join(states, " "), h.copy.checkpoint)
	fmt.Fprintf(b, "store: %d records, %d followers open\n", len(h.st.log), h.st.open)
}

func describeSnapshot(s store.Snapshot) string {
	if s.Tombstone {
		return fmt.Sprintf("%s-@%d", s.Key, s.Offset)
	}
	return fmt.Sprintf("%s=%s@%d", s.Key, s.Value, s.Offset)
}

// tagged encodes a checkpoint as tag@offset, and accepts only its tag's.
type tagged struct{}

func (tagged) Encode(cp store.Checkpoint) []byte { return fmt.Appendf(nil, "%s@%d", tag, cp.Offset) }

func (tagged) Decode(b []byte) (store.Checkpoint, bool) {
	t, off, ok := strings.Cut(string(b), "@")
	n, err := strconv.ParseInt(off, 10, 64)
	return store.Checkpoint{Offset: n}, ok && err == nil && t == tag
}

// fakeStore is one partition: its records, each committed at once.
type fakeStore struct {
	h      *harness
	log    []store.Snapshot
	refuse string
	fail   map[string]bool
	open   int // followers not closed
}

func (s *fakeStore) append(key, value string) {
	snap := store.Snapshot{Key: []byte(key), Offset: int64(len(s.log)), Tombstone: value == ""}
	if !snap.Tombstone {
		snap.Value = []byte(value)
	}
	s.log = append(s.log, snap)
}

// failing says whether call fails this time (once).
func failing(fail map[string]bool, call string) error {
	if fail[call] {
		delete(fail, call)
		return fmt.Errorf("%s failed", call)
	}
	return nil
}

func (s *fakeStore) follow(_ context.Context, from *store.Checkpoint) (store.Follow, error) {
	if err := failing(s.fail, "follow"); err != nil {
		return nil, err
	}
	f := &fakeFollow{s: s, end: -1}
	if from != nil {
		reason := s.refuse
		if reason == "" && from.Offset > int64(len(s.log)) {
			reason = store.CheckpointAboveLogEnd
		}
		if reason != "" {
			return nil, &store.CheckpointError{Reason: reason, Checkpoint: *from, Detail: "the test store refuses it"}
		}
		f.pos, f.vouched = from.Offset, true
	}
	s.open++
	return f, nil
}

type fakeFollow struct {
	s        *fakeStore
	pos, end int64
	vouched  bool
	closed   bool
}

func (f *fakeFollow) Next(ctx context.Context, _ time.Duration) ([]store.Snapshot, store.Checkpoint, bool, error) {
	if err := failing(f.s.fail, "next"); err != nil {
		return nil, store.Checkpoint{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return nil, store.Checkpoint{}, false, err
	}
	f.end = int64(len(f.s.log))
	upto := f.end
	if n := int64(f.s.h.batch); n > 0 {
		upto = min(upto, f.pos+n)
	}
	snaps := slices.Clone(f.s.log[f.pos:upto])
	f.pos = upto
	f.vouched = f.vouched || f.pos >= f.end
	return snaps, store.Checkpoint{Offset: f.pos, At: f.s.h.now}, f.vouched, nil
}

func (f *fakeFollow) Position() (int64, int64) { return f.pos, f.end }

func (f *fakeFollow) HighWatermark(context.Context) (int64, error) {
	if err := failing(f.s.fail, "hw"); err != nil {
		return -1, err
	}
	return int64(len(f.s.log)), nil
}

func (f *fakeFollow) Close() error {
	if !f.closed {
		f.closed = true
		f.s.open--
	}
	return nil
}

// fakeCopy is the local copy: states by key, and a checkpoint.
type fakeCopy struct {
	states     map[string]string
	checkpoint []byte
	fail       map[string]bool
}

func (c *fakeCopy) Checkpoint() ([]byte, bool, error) {
	if err := failing(c.fail, "checkpoint"); err != nil {
		return nil, false, err
	}
	return c.checkpoint, c.checkpoint != nil, nil
}

func (c *fakeCopy) Drop() error {
	if err := failing(c.fail, "drop"); err != nil {
		return err
	}
	clear(c.states)
	c.checkpoint = nil
	return nil
}

func (c *fakeCopy) Replicated(snaps []store.Snapshot, checkpoint []byte) error {
	if err := failing(c.fail, "apply"); err != nil {
		return err
	}
	for _, s := range snaps {
		if s.Tombstone {
			delete(c.states, string(s.Key))
		} else {
			c.states[string(s.Key)] = fmt.Sprintf("%s@%d", s.Value, s.Offset)
		}
	}
	if checkpoint != nil {
		c.checkpoint = checkpoint
	}
	return nil
}
