package engine

import (
	"fmt"

	"github.com/snapfence/snapfence/store"
)

// OutputTooLargeError is why a fold, tick or timer handler failed when
// one of its outputs is over Config.MaxOutputBytes: the producer (or the
// broker) would refuse it on every retry, so it is the record's failure,
// and the poison policy decides (it reaches the user inside a
// *FoldError). errors.Is matches store.ErrValueTooLarge.
type OutputTooLargeError struct {
	// Topic and Key are the output's.
	Topic string
	Key   []byte
	// Size is its key, value and headers, in bytes; Limit is
	// Config.MaxOutputBytes.
	Size, Limit int
}

func (e *OutputTooLargeError) Error() string {
	return fmt.Sprintf("engine: output for topic %q with key %q is %d bytes (key, value and headers), over the limit of %d (engine.Config.MaxOutputBytes)",
		e.Topic, printableKey(e.Key), e.Size, e.Limit)
}

// Unwrap returns store.ErrValueTooLarge.
func (e *OutputTooLargeError) Unwrap() error { return store.ErrValueTooLarge }

// outputBytes is o's key, value and headers.
func outputBytes(o *Output) int {
	n := len(o.Key) + len(o.Value)
	for _, h := range o.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// checkOutputs refuses the first output of outs over limit. Checked as
// the fold returns, before its change is applied: the record then fails
// as any poison record does, in either output mode, and an exactly-once
// batch never carries an output its transaction could not write.
func checkOutputs(outs []Output, limit int) error {
	for i := range outs {
		if n := outputBytes(&outs[i]); n > limit {
			return &OutputTooLargeError{Topic: outs[i].Topic, Key: outs[i].Key, Size: n, Limit: limit}
		}
	}
	return nil
}

// fitDeadLetter makes a dead letter over limit fit: without the record's
// value, then without the record's own headers, saying so in its error
// header. (A record that is poison because its output was too large
// usually is too large itself.)
func fitDeadLetter(o Output, ownHeaders, limit int) Output {
	n := outputBytes(&o)
	if n <= limit {
		return o
	}
	note := fmt.Sprintf(" (left out of this dead letter, %d bytes over engine.Config.MaxOutputBytes: the record's value", n-limit)
	o.Value = nil
	if outputBytes(&o) > limit && ownHeaders > 0 {
		o.Headers = o.Headers[ownHeaders:]
		note += " and its headers"
	}
	for i := range o.Headers {
		if o.Headers[i].Key == HeaderDeadLetterError {
			o.Headers[i].Value = append(o.Headers[i].Value[:len(o.Headers[i].Value):len(o.Headers[i].Value)], note+")"...)
		}
	}
	return o
}
