//go:build !linux

package tools

import "time"

// handshakes is false here: without a futex, Call waits for every answer as a goroutine parks
// (docs/design/performance.md, "The sequential step's thread switches").
const handshakes = false

// wakeWord does nothing here: sleep returns at once, unset.
type wakeWord struct{}

func (w *wakeWord) sleep(time.Duration, time.Duration) bool { return false }

func (w *wakeWord) wake() {}
