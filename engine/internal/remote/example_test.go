package remote

import (
	"context"
	"fmt"
	"time"
)

// A pool with one stdio remote (here the test server; in a studio e.g. mayapy running an MCP
// server). The first call starts the child and reuses it afterwards; failures come back as
// results with a kind the engine retries by.
func ExamplePool_Call() {
	pool, err := NewPool(map[string]Config{
		"maya": {Command: []string{serverBin}, Timeout: 30 * time.Second},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	ctx := context.Background()

	res, _ := pool.Call(ctx, "maya", "echo", map[string]any{"scene": "/shots/a.ma"})
	fmt.Println(res.IsError, res.Output)

	res, _ = pool.Call(ctx, "maya", "fail", map[string]any{"kind": "transient", "message": "Maya is busy"})
	fmt.Println(res.IsError, res.Kind, res.Message)

	_, err = pool.Call(ctx, "unreal", "import_assets", nil)
	fmt.Println(err)
	// Output:
	// false map[scene:/shots/a.ma]
	// true transient Maya is busy
	// unknown remote "unreal" (known remotes: maya)
}
