package engine

import "time"

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
