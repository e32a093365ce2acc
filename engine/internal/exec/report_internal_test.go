package exec

import "testing"

// BenchmarkSilentAttemptReporter is what reporting costs an attempt whose tool reports nothing:
// making its reporter and ending it (one small allocation, no write, no timer).
func BenchmarkSilentAttemptReporter(b *testing.B) {
	in := &inst{r: &runner{}}
	b.ReportAllocs()
	for range b.N {
		in.endReport(in.startReport(1))
	}
}
