package schedule

import (
	"container/list"
	"time"
)

// Defaults of the webhook delivery-id window.
const (
	DefaultDedupSize = 1024
	DefaultDedupTTL  = 24 * time.Hour
)

// deliveryCache remembers the run started for each recent delivery id of one schedule: at most
// size ids, each for ttl. It is not safe for concurrent use; the schedule's admission lock
// guards it.
type deliveryCache struct {
	size int
	ttl  time.Duration
	ll   list.List // of *delivery, most recent first
	byID map[string]*list.Element
}

type delivery struct {
	id    string
	runID string
	at    time.Time
}

func newDeliveryCache(size int, ttl time.Duration) *deliveryCache {
	return &deliveryCache{size: size, ttl: ttl, byID: map[string]*list.Element{}}
}

// get returns the run id recorded for id, if it is in the window at now.
func (c *deliveryCache) get(id string, now time.Time) (string, bool) {
	el, ok := c.byID[id]
	if !ok {
		return "", false
	}
	d := el.Value.(*delivery)
	if now.Sub(d.at) >= c.ttl {
		c.ll.Remove(el)
		delete(c.byID, id)
		return "", false
	}
	c.ll.MoveToFront(el)
	return d.runID, true
}

// put records runID for id at now, evicting the least recently used id when full.
func (c *deliveryCache) put(id, runID string, now time.Time) {
	if el, ok := c.byID[id]; ok {
		d := el.Value.(*delivery)
		d.runID, d.at = runID, now
		c.ll.MoveToFront(el)
		return
	}
	c.byID[id] = c.ll.PushFront(&delivery{id: id, runID: runID, at: now})
	for c.ll.Len() > c.size {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.byID, old.Value.(*delivery).id)
	}
}

func (c *deliveryCache) len() int { return c.ll.Len() }
