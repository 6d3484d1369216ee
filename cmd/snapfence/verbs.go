package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/snapfence/snapfence/internal/operator"
)

// open parses the invocation's settings and connects.
func (v *invocation) open(ctx context.Context) (*operator.Tool, error) {
	conn, t, err := v.load(v.fs)
	if err != nil {
		return nil, usageError{err.Error()}
	}
	if t.Application == "" || t.Input == "" {
		return nil, usageError{"-app and -input are required (or \"application\" and \"input\" in -config)"}
	}
	return operator.Open(ctx, conn, t, v.log)
}

// print writes r as JSON with -json, else with text.
func (v *invocation) print(r any, text func(w io.Writer)) error {
	if v.json {
		enc := json.NewEncoder(v.out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	tw := tabwriter.NewWriter(v.out, 0, 4, 2, ' ', 0)
	text(tw)
	return tw.Flush()
}

func runStatus(ctx context.Context, v *invocation) error {
	tool, err := v.open(ctx)
	if err != nil {
		return err
	}
	defer tool.Close()
	st, err := tool.Status(ctx)
	if err != nil {
		return err
	}
	return v.print(st, func(w io.Writer) {
		fmt.Fprintf(w, "application %s, group %s (%s, %d members), input %s, snapshots %s\n",
			st.Application, st.Group, st.GroupState, st.Members, st.Input, st.SnapshotTopic)
		if st.SnapshotTopicMissing {
			fmt.Fprintf(w, "the snapshot topic %s does not exist: the application has not run here, or names it otherwise (-snapshot-topic)\n", st.SnapshotTopic)
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "PARTITION\tMEMBER\tCOMMITTED\tEND\tLAG\tSNAPSHOT HW\tSNAPSHOT LSO\tTRANSACTIONS")
		for _, p := range st.Partitions {
			member := p.Member
			if member == "" {
				member = "-"
			} else if p.Host != "" {
				member += " (" + p.Host + ")"
			}
			committed := "-"
			if p.Committed >= 0 {
				committed = fmt.Sprint(p.Committed)
				if p.CommittedBy != st.Application {
					committed += " (not by the application)"
				}
			}
			fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", p.Partition, member, committed, p.End, p.Lag,
				offset(p.SnapshotHighWatermark), offset(p.SnapshotLastStable), txns(p.Transactions))
		}
		for _, p := range st.Partitions {
			if p.Err != "" {
				fmt.Fprintf(w, "\npartition %d: %s", p.Partition, p.Err)
			}
			for _, t := range p.Transactions {
				if t.Hanging {
					fmt.Fprintf(w, "\npartition %d: hanging transaction on %s from offset %d (producer %d, epoch %d, %s); abort with: %s",
						p.Partition, t.Partition, t.StartOffset, t.ProducerID, t.ProducerEpoch, whose(t), t.AbortCommand)
				}
			}
		}
		fmt.Fprintln(w)
	})
}

func offset(o int64) string {
	if o < 0 {
		return "-"
	}
	return fmt.Sprint(o)
}

func whose(t operator.Txn) string {
	if t.Own {
		return "the application's own"
	}
	return "not proven the application's"
}

// txns summarises open transactions in a few words.
func txns(ts []operator.Txn) string {
	if len(ts) == 0 {
		return "none"
	}
	var parts []string
	for _, t := range ts {
		kind := "ongoing"
		if t.Hanging {
			kind = "HANGING"
		}
		own := "foreign"
		if t.Own {
			own = "own"
		}
		parts = append(parts, fmt.Sprintf("%s %s on %s@%d", kind, own, t.Partition, t.StartOffset))
	}
	return strings.Join(parts, "; ")
}

func runGet(ctx context.Context, v *invocation) error {
	if v.fs.NArg() != 1 {
		return usageError{"get takes one KEY"}
	}
	tool, err := v.open(ctx)
	if err != nil {
		return err
	}
	defer tool.Close()
	e, err := tool.Get(ctx, []byte(v.fs.Arg(0)), int32(v.partition), v.codec)
	if err != nil {
		return err
	}
	if e == nil {
		if v.json {
			_ = v.print(nil, nil)
		} else {
			fmt.Fprintf(v.out, "key %q has no committed state\n", v.fs.Arg(0))
		}
		return errFound
	}
	return v.print(e, func(w io.Writer) { entries(w, []*operator.Entry{e}) })
}

func runDump(ctx context.Context, v *invocation) error {
	if v.partition < 0 {
		return usageError{"dump needs -partition"}
	}
	tool, err := v.open(ctx)
	if err != nil {
		return err
	}
	defer tool.Close()
	es, err := tool.Dump(ctx, int32(v.partition), v.codec)
	if err != nil {
		return err
	}
	if es == nil {
		es = []*operator.Entry{}
	}
	return v.print(es, func(w io.Writer) {
		entries(w, es)
		fmt.Fprintf(w, "%d keys\n", len(es))
	})
}

func entries(w io.Writer, es []*operator.Entry) {
	fmt.Fprintln(w, "KEY\tOFFSET\tSNAPSHOT\tSTATE")
	for _, e := range es {
		state := e.DecodeErr
		if state == "" {
			b, _ := json.Marshal(e.State)
			state = string(b)
		} else {
			state = "undecodable: " + state
		}
		fmt.Fprintf(w, "%q\t%d\t%d@%d\t%s\n", e.Key, e.Offset, e.Partition, e.SnapshotOffset, state)
	}
}

func runHanging(ctx context.Context, v *invocation) error {
	tool, err := v.open(ctx)
	if err != nil {
		return err
	}
	defer tool.Close()
	rep, err := tool.Hanging(ctx, v.abort)
	if rep != nil {
		_ = v.print(rep, func(w io.Writer) {
			if len(rep.Hanging) == 0 {
				fmt.Fprintln(w, "no hanging transaction")
			}
			for _, t := range rep.Hanging {
				fmt.Fprintf(w, "hanging on %s from offset %d: producer %d epoch %d, %s\n  abort: %s\n",
					t.Partition, t.StartOffset, t.ProducerID, t.ProducerEpoch, whose(t), t.AbortCommand)
			}
			for _, t := range rep.Aborted {
				fmt.Fprintf(w, "aborted producer %d's transaction on %s from offset %d\n", t.ProducerID, t.Partition, t.StartOffset)
			}
			for _, r := range rep.Refused {
				fmt.Fprintf(w, "not aborted: %s\n", r)
			}
		})
	}
	if err != nil {
		return err
	}
	if len(rep.Refused) > 0 || len(rep.Hanging) > len(rep.Aborted) {
		return errFound
	}
	return nil
}
