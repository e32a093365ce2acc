package cluster

import (
	"context"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
)

// settlePoll is how often a hand-over looks whether the host calls it waits for are answered.
const settlePoll = 5 * time.Millisecond

// HandOver gives the other engines the top-level runs of live that one of them can run, as the
// engine closes (MarkClosing came first), and returns their ids. Not handed over, so stopped
// (interrupted) by the caller as on a database of one's own: a paused run or one with a paused
// child run (it stays paused). Returns nil when no engine can take any.
//
// A run to hand over may have host calls that this engine's host is running. HandOver holds
// the host (no call is handed out any more) and those runs (no step instance starts), then
// waits up to the close grace until every such call is answered and its answer written: those
// steps do not run again. It then abandons each run (nothing more of it is written; its child
// runs go with it, a call it queued stays queued for the next orchestrator to adopt, and a host
// call still running is cancelled: the host is told, and the next engine calls that step again,
// as after a kill), and waits up to the interrupt grace for the host to let go of the calls it
// cancelled. Stop then releases the leases and wakes the other engines, whose sweep claims and
// resumes the runs at once, through the takeover path: no completed step runs again.
func (m *Membership) HandOver(ctx context.Context, live []Run) map[string]bool {
	if len(live) == 0 {
		return nil
	}
	engines, err := m.cfg.Leaser.Engines(ctx)
	if err != nil {
		return nil
	}
	others, remotes, n := map[string]bool{}, map[string]bool{}, 0
	for _, en := range engines {
		if en.ID == m.ID() || !en.Live || en.Closing {
			continue
		}
		n++
		for _, t := range en.Tools {
			others[t] = true
		}
		for _, r := range en.Remotes {
			remotes[r] = true
		}
	}
	if n == 0 {
		return nil
	}
	keep := map[string]bool{} // runs with a paused child run
	for _, h := range live {
		if a := h.Ancestors(); len(a) > 0 && h.Paused() {
			keep[a[0]] = true
		}
	}
	cands := map[string]Run{}
	for _, h := range live {
		if len(h.Ancestors()) > 0 || keep[h.ID()] || isDone(h.Done()) || h.Paused() {
			continue
		}
		if m.local.CanRunOn(ctx, h.ID(), others, remotes) {
			cands[h.ID()] = h
		}
	}
	if len(cands) == 0 {
		return nil
	}
	// Each candidate with its child runs: their host calls count as the candidate's.
	group := map[string][]Run{}
	for _, h := range live {
		top := h.ID()
		if a := h.Ancestors(); len(a) > 0 {
			top = a[0]
		}
		if cands[top] != nil {
			group[top] = append(group[top], h)
		}
	}
	// Nothing new starts here any more: no host call is handed out, and no step instance of
	// any run starts (those not handed over are stopped right after).
	host := m.cfg.Host
	host.Hold()
	for _, h := range live {
		h.Hold()
	}
	busy := func(top string) bool {
		for _, h := range group[top] {
			if h.HostBusy() {
				return true
			}
		}
		return false
	}
	m.settleHostCalls(ctx, cands, busy)
	handed := map[string]bool{}
	cut := map[string]bool{} // handed over with a host call still running: cancelled
	for id, h := range cands {
		if isDone(h.Done()) || h.Paused() { // ended, or paused, within the grace
			continue
		}
		if busy(id) {
			cut[id] = true
		}
		h.Abandon()
		handed[id] = true
	}
	if len(cut) > 0 {
		m.awaitLetGo(ctx, host.LetGoOf(cut))
	}
	if len(handed) > 0 {
		m.mu.Lock()
		m.handed += len(handed)
		m.cut += len(cut)
		m.mu.Unlock()
		m.local.Notify()
	}
	return handed
}

// settleHostCalls waits, up to the close grace or the end of ctx, until no run of cands that is
// still going has a host call in flight whose outcome is not written (busy).
func (m *Membership) settleHostCalls(ctx context.Context, cands map[string]Run, busy func(string) bool) {
	c := m.cfg.Clock
	deadline := c.Now().Add(m.cfg.CloseGrace)
	for {
		waiting := false
		for id, h := range cands {
			if !isDone(h.Done()) && busy(id) {
				waiting = true
				break
			}
		}
		if !waiting || !c.Now().Before(deadline) {
			return
		}
		if clock.Sleep(ctx, c, settlePoll) != nil {
			return
		}
	}
}

// awaitLetGo waits, up to the interrupt grace or the end of ctx, until every channel of letGo
// is closed: the host let go of the calls a hand-over cancelled (a host that honours the cancel
// stops them before the next engine calls the step again).
func (m *Membership) awaitLetGo(ctx context.Context, letGo []<-chan struct{}) {
	t := m.cfg.Clock.NewTimer(m.cfg.InterruptGrace)
	defer t.Stop()
	for _, ch := range letGo {
		select {
		case <-ch:
		case <-t.C():
			return
		case <-ctx.Done():
			return
		}
	}
}
