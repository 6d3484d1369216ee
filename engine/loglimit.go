package engine

import (
	"encoding/hex"
	"log/slog"
	"time"
	"unicode"
	"unicode/utf8"
)

// logEvery is the least time between two log lines of one kind of repeated
// failure of one partition (a transient failure's restarts, skipped poison
// records): the first is logged at once, later ones at most this often,
// with how many were not logged meanwhile.
const logEvery = 30 * time.Second

// logLimiter bounds the rate of repeated log lines, per key, on the
// source's clock. Its user serialises calls (the runner's lock).
type logLimiter struct {
	last       map[string]time.Time
	suppressed map[string]int
}

func newLogLimiter() *logLimiter {
	return &logLimiter{last: map[string]time.Time{}, suppressed: map[string]int{}}
}

// allow reports whether a line of key may be logged at now, and how many
// were held back since the last one that was.
func (l *logLimiter) allow(key string, now time.Time) (ok bool, suppressed int) {
	if last, seen := l.last[key]; seen && now.Sub(last) < logEvery {
		l.suppressed[key]++
		return false, 0
	}
	l.last[key] = now
	suppressed = l.suppressed[key]
	delete(l.suppressed, key)
	return true, suppressed
}

// logKey is a key as a log attribute: its text when it is printable
// UTF-8, else 0x and its bytes in hex, cut to 64 bytes either way. (A
// []byte attribute is base64 in a JSON log, unreadable even for a text
// key.)
type logKey []byte

// LogValue implements slog.LogValuer.
func (k logKey) LogValue() slog.Value {
	const max = 64
	b, cut := []byte(k), ""
	if len(b) > max {
		b, cut = b[:max], "..."
	}
	printable := utf8.Valid(b)
	for _, r := range string(b) {
		if !unicode.IsPrint(r) {
			printable = false
			break
		}
	}
	if printable {
		return slog.StringValue(string(b) + cut)
	}
	return slog.StringValue("0x" + hex.EncodeToString(b) + cut)
}
