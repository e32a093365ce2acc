package main

import (
	"sync"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

func TestHandleTable(t *testing.T) {
	t.Parallel()
	tab := newHandleTable[string]()
	if _, err := tab.get(0); run.CodeOf(err) != run.CodeStaleHandle {
		t.Fatalf("handle 0: %v", err)
	}
	a, b := tab.add("a"), tab.add("b")
	if a == 0 || b == a {
		t.Fatalf("handles %d %d", a, b)
	}
	if v, err := tab.get(b); err != nil || v != "b" {
		t.Fatalf("get: %q %v", v, err)
	}
	if _, ok := tab.remove(a); !ok {
		t.Fatal("remove")
	}
	if _, ok := tab.remove(a); ok {
		t.Fatal("second remove succeeded")
	}
	if _, err := tab.get(a); run.CodeOf(err) != run.CodeStaleHandle {
		t.Fatalf("stale: %v", err)
	}
	if c := tab.add("c"); c == a || c == b {
		t.Fatalf("handle reused: %d", c)
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 1000; j++ {
				h := tab.add("x")
				if _, err := tab.get(h); err != nil {
					t.Error(err)
				}
				tab.remove(h)
			}
		}()
	}
	wg.Wait()
}
