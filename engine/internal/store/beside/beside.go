// Package beside keeps a value beside an object whose type has no field for it — the state a
// store's optional feature needs (engine/internal/store/memslots beside a memstore.Store) without
// changing the store's struct — for as long as the object lives: the value is dropped once the
// object is garbage collected.
package beside

import (
	"runtime"
	"sync"
	"weak"
)

// Table maps objects of type K to a value of type V each. The zero value is ready; safe for
// concurrent use.
type Table[K, V any] struct {
	mu sync.Mutex
	m  map[weak.Pointer[K]]*V
}

// Get returns the value beside k, made by init on the first Get of k. It is dropped once k is
// unreachable (a later object at the same address gets a new one).
func (t *Table[K, V]) Get(k *K, init func() *V) *V {
	wp := weak.Make(k)
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.m[wp]; ok {
		return v
	}
	if t.m == nil {
		t.m = map[weak.Pointer[K]]*V{}
	}
	v := init()
	t.m[wp] = v
	runtime.AddCleanup(k, func(wp weak.Pointer[K]) {
		t.mu.Lock()
		delete(t.m, wp)
		t.mu.Unlock()
	}, wp)
	return v
}

// Len returns the number of values kept (for tests).
func (t *Table[K, V]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
