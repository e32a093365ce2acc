package spec_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// A spec (sent over MCP, say) whose step asks for 5,000 undeclared resources, against an engine
// declaring 2,000, is checked in bounded time and memory: the "did you mean" work has the
// validator's budget, and each problem lists at most 10 declared names ("and 1990 more"), not
// all 2,000 (which made 5,000 messages of 20 KB each: 100 MB, and 5,000 × 2,000 edit
// distances).
func TestRedteamCheckResourcesManyUnknownNames(t *testing.T) {
	t.Parallel()
	limits := map[string]int{}
	for i := range 2000 {
		limits[fmt.Sprintf("licence_%04d", i)] = 1
	}
	var b strings.Builder
	b.WriteString("steps:\n  - id: greedy\n    tool: t\n    resources:\n")
	for i := range 5000 {
		fmt.Fprintf(&b, "      want_%05d: 1\n", i)
	}
	s := mustParse(t, b.String())
	start := time.Now()
	err := s.CheckResources(limits)
	took := time.Since(start)
	var ve *spec.ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 5000 {
		t.Fatalf("CheckResources: %T, want 5,000 problems", err)
	}
	total := 0
	for _, p := range ve.Problems {
		total += len(p.Message)
	}
	if total > 5000*1000 {
		t.Fatalf("the problems' messages take %d bytes", total)
	}
	if !strings.Contains(ve.Problems[0].Message, `"licence_0009" and 1990 more`) {
		t.Fatalf("message %q", ve.Problems[0].Message)
	}
	if took > 5*time.Second {
		t.Fatalf("CheckResources took %v", took)
	}
}
