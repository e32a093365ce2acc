package resgate

import (
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// The waker hands a notification to the waiter it names, keeps one at a time per waiter (a
// grant over a retry, never a retry over a grant), and drops those of holders that do not wait
// here (another engine's, or one that left).
func TestSlotWakerKeepsAGrantOverARetry(t *testing.T) {
	var k slotWaker
	ch := k.add("h1")
	k.wake(store.SlotWake{Holder: "h1", Granted: true})
	k.wake(store.SlotWake{Holder: "h1"}) // a retry after the grant: the grant is kept
	k.wake(store.SlotWake{Holder: "other", Granted: true})
	if got := <-ch; !got {
		t.Fatal("the grant was replaced by a retry")
	}
	select {
	case got := <-ch:
		t.Fatalf("a second wake-up %v; one is kept", got)
	default:
	}
	k.wake(store.SlotWake{Holder: "h1"})
	if got := <-ch; got {
		t.Fatal("a retry read as a grant")
	}
	k.remove("h1")
	k.wake(store.SlotWake{Holder: "h1", Granted: true}) // left: dropped, no panic, no block
	if len(k.waiters) != 0 || k.cancel != nil {
		t.Fatalf("waker not empty after remove: %+v", k.waiters)
	}
}
