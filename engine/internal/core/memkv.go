package core

import (
	"bytes"
	"iter"
	"slices"
)

// MemKV is a KV in memory, ordered, for tests and the simulated cluster.
type MemKV struct {
	keys []string // sorted
	vals map[string][]byte
}

// NewMemKV returns an empty MemKV.
func NewMemKV() *MemKV { return &MemKV{vals: map[string][]byte{}} }

func (m *MemKV) Get(key []byte) ([]byte, bool, error) {
	v, ok := m.vals[string(key)]
	return v, ok, nil
}

func (m *MemKV) Set(key, value []byte) error {
	k := string(key)
	if _, ok := m.vals[k]; !ok {
		i, _ := slices.BinarySearch(m.keys, k)
		m.keys = slices.Insert(m.keys, i, k)
	}
	m.vals[k] = bytes.Clone(value)
	return nil
}

func (m *MemKV) Delete(key []byte) error {
	k := string(key)
	if _, ok := m.vals[k]; ok {
		i, _ := slices.BinarySearch(m.keys, k)
		m.keys = slices.Delete(m.keys, i, i+1)
		delete(m.vals, k)
	}
	return nil
}

func (m *MemKV) Scan(prefix []byte) iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		i, _ := slices.BinarySearch(m.keys, string(prefix))
		for ; i < len(m.keys) && bytes.HasPrefix([]byte(m.keys[i]), prefix); i++ {
			k := m.keys[i]
			if !yield([]byte(k), m.vals[k]) {
				return
			}
		}
	}
}

func (m *MemKV) DeletePrefix(prefix []byte) error {
	i, _ := slices.BinarySearch(m.keys, string(prefix))
	j := i
	for j < len(m.keys) && bytes.HasPrefix([]byte(m.keys[j]), prefix) {
		delete(m.vals, m.keys[j])
		j++
	}
	m.keys = slices.Delete(m.keys, i, j)
	return nil
}

// Apply applies ws in order (memory has no crash to be atomic through).
func (m *MemKV) Apply(ws []Write) error {
	for _, w := range ws {
		if w.Delete {
			_ = m.Delete(w.Key)
		} else {
			_ = m.Set(w.Key, w.Value)
		}
	}
	return nil
}

// Len is the number of entries.
func (m *MemKV) Len() int { return len(m.keys) }

// Range implements ReadKV (on the caller's goroutine: MemKV is not safe
// for concurrent use).
func (m *MemKV) Range(lower, upper []byte, fn func(k, v []byte) bool) error {
	i, _ := slices.BinarySearch(m.keys, string(lower))
	for ; i < len(m.keys) && (upper == nil || m.keys[i] < string(upper)); i++ {
		if !fn([]byte(m.keys[i]), m.vals[m.keys[i]]) {
			break
		}
	}
	return nil
}
