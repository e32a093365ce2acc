package main

/*
#include <stdlib.h>
extern char **environ;

static char *dccflow_env_at(int i) { return environ ? environ[i] : NULL; }
*/
import "C"

// liveEnviron returns the process environment as it is now. Go's os.Environ is a copy taken
// when the library was loaded; a DCC or a Python script that sets a variable afterwards
// (os.environ["X"] = …) is only visible through the C environment.
func liveEnviron() []string {
	var out []string
	for i := 0; ; i++ {
		p := C.dccflow_env_at(C.int(i))
		if p == nil {
			return out
		}
		out = append(out, C.GoString(p))
	}
}
