package engine

import "github.com/dcc-flow/dcc-flow/engine/internal/tools"

// PullRequest selects the host tool calls Host().Pull hands out: lanes, an optional run, a
// batch size, a wait bound and a stop channel (see RunDone).
type PullRequest = tools.PullRequest

// ErrDropped is what Host().Complete's error wraps (errors.Is) when the result came late: the
// call is no longer pending (its step was cancelled or timed out, or it was already answered)
// and the result was dropped. The error has code invalid_state.
var ErrDropped = tools.ErrDropped

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// RunDone returns a channel that is closed once the run has finished executing. For a run that
// is not executing in this engine (finished, unknown, or from an earlier process) the channel is
// already closed.
func (e *Engine) RunDone(runID string) <-chan struct{} {
	if h := e.live(runID); h != nil {
		return h.Done()
	}
	return closedChan
}
