//go:build !race

package filehash

// raceEnabled is true under the race detector (go test -race).
const raceEnabled = false
