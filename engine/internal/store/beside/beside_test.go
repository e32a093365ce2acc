package beside_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store/beside"
)

type obj struct{ _ [16]byte }

// Get returns one value per object, made once; the value goes when its object is collected.
func TestGetAndCleanup(t *testing.T) {
	var tab beside.Table[obj, int]
	made := 0
	init := func() *int { made++; v := made; return &v }
	a, b := &obj{}, &obj{}
	if *tab.Get(a, init) != 1 || *tab.Get(b, init) != 2 || *tab.Get(a, init) != 1 || made != 2 {
		t.Fatalf("values not one per object (made %d)", made)
	}
	runtime.KeepAlive(b)
	a, b = nil, nil
	_, _ = a, b
	deadline := time.Now().Add(10 * time.Second)
	for tab.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d values kept after their objects were collected", tab.Len())
		}
		runtime.GC()
		runtime.Gosched()
	}
}
