package kafkatest

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// LateServing makes a kfake cluster serve new topics late, as Kafka does
// for a moment after it acknowledges CreateTopics: its controller has
// committed the topic, but the leader does not serve the partitions yet
// and answers UNKNOWN_TOPIC_OR_PARTITION. kfake serves a topic as soon as
// it answers the CreateTopics, so without this a create-then-use race
// never shows on it.
type LateServing struct {
	mu      sync.Mutex
	n       int
	left    map[string]int // topic -> ListOffsets requests still to refuse
	refused map[string]int
}

// ServeLate installs LateServing on c: once a CreateTopics request has
// named a topic (kfake handles it as usual), the first n ListOffsets
// requests that name only such topics are answered UNKNOWN_TOPIC_OR_PARTITION for every
// partition; each such request counts against every topic it names. A
// request that names another topic as well passes through, and counts
// against nothing.
func ServeLate(c *kfake.Cluster, n int) *LateServing {
	l := &LateServing{n: n, left: map[string]int{}, refused: map[string]int{}}
	c.ControlKey(int16(kmsg.CreateTopics), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, t := range kreq.(*kmsg.CreateTopicsRequest).Topics {
			if _, named := l.left[t.Topic]; !named {
				l.left[t.Topic] = l.n
			}
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.ListOffsets), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ListOffsetsRequest)
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(req.Topics) == 0 {
			return nil, nil, false
		}
		for _, rt := range req.Topics {
			if l.left[rt.Topic] == 0 {
				return nil, nil, false
			}
		}
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range req.Topics {
			l.left[rt.Topic]--
			l.refused[rt.Topic]++
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.UnknownTopicOrPartition.Code
				sp.Offset, sp.Timestamp, sp.LeaderEpoch = -1, -1, -1
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return l
}

// Refused is how many ListOffsets requests naming topic were refused.
func (l *LateServing) Refused(topic string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refused[topic]
}

// Served reports whether topic is served: no refusal is left for it.
func (l *LateServing) Served(topic string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.left[topic] == 0
}
