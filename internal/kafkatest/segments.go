package kafkatest

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
)

// CutSegments truncates every segment file that pattern matches at the
// first record batch whose base offset is at or past end: a log that lost
// its tail, as a broker that lost unreplicated records has. Both Kafka's
// .log files and kfake's .dat files hold record batches in the wire
// format, each starting with its base offset (int64) and the length of
// the rest (int32). The broker must be stopped.
func CutSegments(pattern string, end int64) error {
	segs, err := filepath.Glob(pattern)
	if err != nil {
		return err
	}
	if len(segs) == 0 {
		return fmt.Errorf("kafkatest: no segments at %s", pattern)
	}
	for _, seg := range segs {
		raw, err := os.ReadFile(seg)
		if err != nil {
			return err
		}
		pos := 0
		for pos+12 <= len(raw) {
			if int64(binary.BigEndian.Uint64(raw[pos:pos+8])) >= end {
				break
			}
			pos += 12 + int(binary.BigEndian.Uint32(raw[pos+8:pos+12]))
		}
		if err := os.Truncate(seg, int64(pos)); err != nil {
			return err
		}
	}
	return nil
}
