package cluster

import (
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// A relayed line cut to the limits keeps its stream, attempt, level and logger.
func TestBoundLineKeepsLevelAndLogger(t *testing.T) {
	l := run.LogLine{Stream: run.StreamLog, Text: strings.Repeat("x", run.MaxLogLineBytes+10), Attempt: 2,
		Level: "WARNING", Logger: "studio.export"}
	b := boundLine(l)
	if len(b.Text) > run.MaxLogLineBytes || b.Stream != run.StreamLog || b.Attempt != 2 || b.Level != "WARNING" || b.Logger != "studio.export" {
		t.Fatalf("bound %+v", b)
	}
}
