package world

import "time"

// CrashAndStaleOwner is the exactly-once outputs' scripted scenario: m0
// folds and is paused with a batch it has not committed; m1 takes over
// and commits; m0 wakes and flushes its stale batch; then m1 crashes
// (with a transaction open on the simulated cluster) and m2 takes over.
var CrashAndStaleOwner = []Step{
	{Kind: Join, Member: 0},
	{Kind: Produce, Key: "a", Delta: 10},
	{Kind: Produce, Key: "b", Delta: 5},
	{Kind: Poll, Member: 0},
	{Kind: Poll, Member: 0},
	{Kind: Advance, D: 11 * time.Second},
	{Kind: Poll, Member: 0},
	{Kind: Produce, Key: "a", Delta: 1},
	{Kind: Produce, Key: "c", Delta: 7},
	{Kind: Poll, Member: 0}, // folds; commits nothing yet
	{Kind: Pause, Member: 0},
	{Kind: Join, Member: 1},
	{Kind: Advance, D: 11 * time.Second},
	{Kind: Poll, Member: 1},
	{Kind: Poll, Member: 1},
	{Kind: Advance, D: 11 * time.Second},
	{Kind: Poll, Member: 1},
	{Kind: Resume, Member: 0},
	{Kind: Flush, Member: 0}, // the stale owner's batch
	{Kind: Produce, Key: "b", Delta: 2},
	{Kind: Produce, Key: "d", Delta: 3},
	{Kind: Poll, Member: 1},
	{Kind: Crash, Member: 1},
	{Kind: Join, Member: 2},
	{Kind: Poll, Member: 2},
	{Kind: Advance, D: 11 * time.Second},
	{Kind: Poll, Member: 2},
}

// CrashStaleOwnerAndForeign is CrashAndStaleOwner with a foreign producer's
// transaction open on a snapshot partition when m2 takes over: m2's
// recovery waits behind it until it aborts, then m2 replays what m1's
// crash lost. Outputs must still be exactly once.
var CrashStaleOwnerAndForeign = append(CrashAndStaleOwner[:len(CrashAndStaleOwner)-4:len(CrashAndStaleOwner)-4],
	Step{Kind: ForeignOpen, Partition: int(PartitionOf("a", 2))},
	Step{Kind: Join, Member: 2},
	Step{Kind: Poll, Member: 2}, // the recovery waits behind the foreign transaction
	Step{Kind: Advance, D: 11 * time.Second},
	Step{Kind: ForeignEnd, Commit: false},
	Step{Kind: Poll, Member: 2},
	Step{Kind: Advance, D: 11 * time.Second},
	Step{Kind: Poll, Member: 2},
)
