package engine

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
