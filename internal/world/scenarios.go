package world

import "time"

// Scenario732 is kafka-flow#732 as steps: m0 folds events it has not
// flushed and pauses; m1 takes the partitions once m0's session expires,
// folds newer events and flushes; m0 wakes and flushes before it learns.
var Scenario732 = []Step{
	{Kind: Join, Member: 0},
	{Kind: Produce, Key: "a", Delta: 10},
	{Kind: Poll, Member: 0},
	{Kind: Poll, Member: 0},
	{Kind: Advance, D: 10 * time.Second},
	{Kind: Poll, Member: 0}, // flush and commit a=10
	{Kind: Produce, Key: "a", Delta: 5},
	{Kind: Poll, Member: 0}, // folds a=15, not flushed
	{Kind: Pause, Member: 0},
	{Kind: Join, Member: 1},
	{Kind: Poll, Member: 1},
	{Kind: Advance, D: 11 * time.Second}, // m0's session expires
	{Kind: Poll, Member: 1},
	{Kind: Poll, Member: 1}, // m1 owns everything, recovers a=10, folds a=15
	{Kind: Produce, Key: "a", Delta: 100},
	{Kind: Poll, Member: 1},
	{Kind: Advance, D: 10 * time.Second},
	{Kind: Poll, Member: 1}, // m1 flushes a=115 and commits
	{Kind: Resume, Member: 0},
	{Kind: Flush, Member: 0}, // m0's stale a=15
}
