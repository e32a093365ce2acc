//go:build dccflow_cabitest

package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import "unsafe"

// This file is compiled only with -tags dccflow_cabitest. It lets tests (which cannot use cgo)
// call the real exports through C strings, the way a C caller does, and free the results with
// dccflow_free.

// exportFunc is the shape of every JSON export; exportsByName (cabi_exports_gen.go, generated
// from capi/internal/gen/table.go) lists them by name.
type exportFunc func(C.uint64_t, *cchar, **C.char) C.int32_t

// callExport calls the named export with in (nil means a NULL in_json) and returns the return
// code and the output string (nil out pointer when passNilOut).
func callExport(name string, handle uint64, in *string, passNilOut bool) (int32, string) {
	fn := exportsByName[name]
	var cin *cchar
	if in != nil {
		p := C.CString(*in)
		defer C.free(unsafe.Pointer(p))
		cin = (*cchar)(unsafe.Pointer(p))
	}
	if passNilOut {
		return int32(fn(C.uint64_t(handle), cin, nil)), ""
	}
	var out *C.char
	rc := fn(C.uint64_t(handle), cin, &out)
	s := C.GoString(out)
	dccflow_free(out)
	return int32(rc), s
}

func abiVersionExport() uint32 { return uint32(dccflow_abi_version()) }

func freeNil() { dccflow_free(nil) }
