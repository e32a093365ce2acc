package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"unsafe"
)

func main() {}

// call converts the C arguments, runs op through dispatch and stores the result in *out.
func call(h C.uint64_t, in *C.char, out **C.char, fn op) C.int32_t {
	var input []byte
	if in != nil {
		input = []byte(C.GoString(in))
	}
	res, rc := dispatch(uint64(h), input, fn)
	if out != nil {
		*out = C.CString(string(res))
	}
	return C.int32_t(rc)
}

// dccflow_abi_version returns the ABI version (1). Callers refuse a library whose version differs.
//
//export dccflow_abi_version
func dccflow_abi_version() C.uint32_t { return abiVersion }

// dccflow_free frees a string returned by the library. NULL is ignored.
//
//export dccflow_free
func dccflow_free(p *C.char) {
	if p != nil {
		C.free(unsafe.Pointer(p))
	}
}

// dccflow_version: in {} → {"version": "0.1.0", "abi_version": 1, "go_version": "go1.26.8"}.
//
//export dccflow_version
func dccflow_version(h C.uint64_t, in *C.char, out **C.char) C.int32_t {
	return call(h, in, out, opVersion)
}

// dccflow_spec_parse: in {"text": "...", "format": "auto", "source": "a.yaml"} →
// {"spec": {...canonical...}, "spec_hash": "...", "warnings": [], "problems": []}.
//
//export dccflow_spec_parse
func dccflow_spec_parse(h C.uint64_t, in *C.char, out **C.char) C.int32_t {
	return call(h, in, out, opSpecParse)
}

// dccflow_spec_validate: in as dccflow_spec_parse → {"valid": true, "spec_hash": "...", "warnings": []},
// or the validation_failed envelope listing every problem.
//
//export dccflow_spec_validate
func dccflow_spec_validate(h C.uint64_t, in *C.char, out **C.char) C.int32_t {
	return call(h, in, out, opSpecValidate)
}
