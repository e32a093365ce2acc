package tracectx

import (
	"context"
	"testing"
)

func TestValid(t *testing.T) {
	for s, want := range map[string]bool{
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01": true,
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00": true, // not sampled
		"": false,
		"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01":  false, // another version
		"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01":  false, // uppercase
		"00-00000000000000000000000000000000-b7ad6b7169203331-01":  false, // zero trace id
		"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01":  false, // zero span id
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0g":  false,
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-": false,
		"00-0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331-01":  false,
		"00-0af7651916cd43dd8448eb211c8031\n9c-b7ad6b716920333-01": false,
	} {
		if got := Valid(s); got != want {
			t.Errorf("Valid(%q) = %v; want %v", s, got, want)
		}
	}
}

func TestWithFrom(t *testing.T) {
	ctx := context.Background()
	if With(ctx, "") != ctx || From(ctx) != "" {
		t.Fatal("With of \"\" must return ctx itself, carrying nothing")
	}
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	if got := From(With(ctx, tp)); got != tp {
		t.Fatalf("From(With(tp)) = %q", got)
	}
}
