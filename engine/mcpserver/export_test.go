package mcpserver

import "time"

// SubscriptionStats reports the sessions and watches the server tracks for resources/subscribe,
// whether its event reader runs, and a channel closed once the latest reader has returned.
func (s *Server) SubscriptionStats() (sessions, watches int, reading bool, readerDone <-chan struct{}) {
	return s.subs.stats()
}

// OnUpdateSent makes the server call f for each notifications/resources/updated it delivers,
// with the sequence number of the newest event of the run it had seen. Call it before any
// subscription.
func (s *Server) OnUpdateSent(f func(sessionID, uri string, seq uint64)) {
	s.subs.mu.Lock()
	defer s.subs.mu.Unlock()
	s.subs.sent = f
}

// UpdateInterval is the coalescing window of notifications/resources/updated.
func (s *Server) UpdateInterval() time.Duration { return s.subs.interval }

// RateLimitedSessions counts the sessions the workflows_run rate limiter holds a bucket for.
func (s *Server) RateLimitedSessions() int {
	s.limiter.mu.Lock()
	defer s.limiter.mu.Unlock()
	return len(s.limiter.bkts)
}
