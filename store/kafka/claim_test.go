package kafka_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/snapfence/snapfence/store"
	"github.com/snapfence/snapfence/store/storetest"
)

// A transaction coordinator that is not available yet (a fresh cluster's
// first use of it answers COORDINATOR_NOT_AVAILABLE for a while) holds
// the takeover check back as it holds the takeover itself: Acquire asks
// again until it answers, rather than failing.
func TestTheTakeoverCheckWaitsForACoordinatorToComeUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWorld(t)
		in := store.TopicPartition{Topic: inputTopic, Partition: 0}
		m := w.Join(t)
		// Longer than franz-go retries a coordinator's refusal on its own.
		up := time.Now().Add(45 * time.Second)
		w.c.ControlKey(int16(kmsg.DescribeTransactions), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			if time.Now().After(up) {
				return nil, nil, false
			}
			w.c.KeepControl()
			req := kreq.(*kmsg.DescribeTransactionsRequest)
			resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
			for _, id := range req.TransactionalIDs {
				st := kmsg.NewDescribeTransactionsResponseTransactionState()
				st.TransactionalID, st.ErrorCode = id, kerr.CoordinatorNotAvailable.Code
				resp.TransactionStates = append(resp.TransactionStates, st)
			}
			return resp, nil, true
		})
		b := w.Backend(t, storetest.BackendConfig{Mode: store.Transactional})
		p, err := b.Acquire(context.Background(), store.Acquisition{Input: in, Identity: store.IdentityFunc(m.Identity)})
		if err != nil {
			t.Fatalf("Acquire while the coordinator comes up: %v", err)
		}
		t.Cleanup(func() { _ = p.Close() })
		if time.Now().Before(up) {
			t.Fatalf("Acquire returned at %v, before the coordinator answered", time.Until(up))
		}
	})
}
