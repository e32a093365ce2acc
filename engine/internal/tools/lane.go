package tools

// lane is the queue of one lane's calls. Calls are kept twice, in the order they were queued:
// in all (for pulls of any run) and in byRun (for pulls of one run), so either pull takes the
// oldest matching call in time independent of how many other runs have calls queued.
//
// Entries are deleted lazily: a call taken, withdrawn or handed back leaves dead entries (see
// slot.live) that the queues drop when they reach the head, or all at once when dead entries
// make up most of all (compact).
type lane struct {
	all     fifo
	dead    int              // dead entries in all
	byRun   map[string]*fifo // live or dead entries by run id; a run without entries has none
	waiters int              // goroutines blocked in Pull on this lane
	wake    chan struct{}    // closed (and replaced) when a call is queued while waiters > 0
}

func newLane() *lane {
	return &lane{byRun: map[string]*fifo{}, wake: make(chan struct{})}
}

// slot is a queue entry: live while its call is queued under the generation it was queued with
// (a call handed back is queued again under the next generation, so its old entries stay dead).
type slot struct {
	p   *pending
	gen uint32
}

func (s slot) live() bool { return s.p != nil && s.p.state == stateQueued && s.p.gen == s.gen }

// fifo is a queue of slots from head.
type fifo struct {
	s    []slot
	head int
}

func (f *fifo) push(p *pending) { f.s = append(f.s, slot{p, p.gen}) }

func (f *fifo) pushFront(p *pending) {
	if f.head > 0 {
		f.head--
		f.s[f.head] = slot{p, p.gen}
		return
	}
	f.s = append(f.s, slot{})
	copy(f.s[1:], f.s)
	f.s[0] = slot{p, p.gen}
}

// trim drops the dead entries at the head and returns how many it dropped; the fifo is empty
// when front returns nil.
func (f *fifo) trim() int {
	n := 0
	for f.head < len(f.s) && !f.s[f.head].live() {
		f.s[f.head] = slot{}
		f.head++
		n++
	}
	if f.head == len(f.s) {
		f.s, f.head = f.s[:0], 0
	} else if f.head > 64 && f.head*2 > len(f.s) { // give the dropped prefix back
		k := copy(f.s, f.s[f.head:])
		clear(f.s[k:])
		f.s, f.head = f.s[:k], 0
	}
	return n
}

// front returns the first live call after trim, or nil.
func (f *fifo) front() *pending {
	if f.head < len(f.s) {
		return f.s[f.head].p
	}
	return nil
}

// enqueue adds p at the back (handedBack false) or the front (true) of the lane: in all, and
// in byRun under its run and under each run above it (Call.Ancestors: a sub-workflow's call is
// also a call of its parent run, for a host thread that drives the parent).
func (ln *lane) enqueue(p *pending, handedBack bool) {
	if handedBack {
		ln.all.pushFront(p)
	} else {
		ln.all.push(p)
	}
	p.eachRun(func(id string) {
		rq := ln.byRun[id]
		if rq == nil {
			rq = &fifo{}
			ln.byRun[id] = rq
		}
		if handedBack {
			rq.pushFront(p)
		} else {
			rq.push(p)
		}
	})
	if ln.waiters > 0 {
		close(ln.wake)
		ln.wake = make(chan struct{})
	}
}

// left records that the queued call p has left the queue (taken, withdrawn): its entries are
// dead now. It drops dead heads, forgets a run without entries and, when compact is true and
// dead entries make up most of the queue, rebuilds it.
func (ln *lane) left(p *pending, compact bool) {
	ln.dead++
	ln.dead -= ln.all.trim()
	p.eachRun(func(id string) {
		if rq := ln.byRun[id]; rq != nil {
			if rq.trim(); rq.front() == nil {
				delete(ln.byRun, id)
			}
		}
	})
	if compact && ln.dead > 64 && ln.dead*2 > len(ln.all.s)-ln.all.head {
		live := ln.all.s[:0]
		for _, s := range ln.all.s[ln.all.head:] {
			if s.live() {
				live = append(live, s)
			}
		}
		clear(ln.all.s[len(live):])
		ln.all.s, ln.all.head, ln.dead = live, 0, 0
	}
}

// next returns the oldest queued call of run runID ("" = any run), or nil.
func (ln *lane) next(runID string) *pending {
	if runID == "" {
		ln.dead -= ln.all.trim()
		return ln.all.front()
	}
	rq := ln.byRun[runID]
	if rq == nil {
		return nil
	}
	rq.trim()
	return rq.front()
}
