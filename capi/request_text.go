package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// checkRequestText refuses request text that encoding/json would accept by guessing: bytes that
// are not UTF-8 (it would replace them with U+FFFD, changing a file name without a word) and an
// object with the same key twice (it would keep the last, silently dropping the other). It runs
// in one pass over the text before decoding; malformed JSON is left to the decoder's message.
func checkRequestText(in []byte) error {
	if !utf8.Valid(in) {
		off := 0
		for off < len(in) {
			r, size := utf8.DecodeRune(in[off:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			off += size
		}
		return &badRequest{msg: fmt.Sprintf("invalid request JSON: the text is not UTF-8 (byte 0x%02x at offset %d); encode strings as UTF-8", in[off], off)}
	}
	if key, off, dup := duplicateKey(in); dup {
		return &badRequest{msg: fmt.Sprintf("invalid request JSON: key %s appears twice in one object (the second at offset %d); give each key once", strconv.Quote(key), off)}
	}
	return nil
}

// duplicateKey scans JSON text and returns the first key given twice in one object, with the
// offset of its second occurrence. One pass over the bytes (string bodies are skipped with
// IndexByte); keys are compared in place, without copies, in one buffer shared by the open
// objects. An object past 16 keys gets a set, so a huge object stays linear.
func duplicateKey(in []byte) (key string, offset int, dup bool) {
	type frame struct {
		object  bool
		wantKey bool
		start   int                 // this object's first key in keys
		set     map[string]struct{} // once it has more than 16 keys
	}
	var stack []frame
	var keys [][]byte
	for i := 0; i < len(in); i++ {
		switch in[i] {
		case '{':
			stack = append(stack, frame{object: true, wantKey: true, start: len(keys)})
		case '[':
			stack = append(stack, frame{start: len(keys)})
		case '}', ']':
			if n := len(stack); n > 0 {
				keys = keys[:stack[n-1].start]
				stack = stack[:n-1]
			}
		case ',':
			if n := len(stack); n > 0 && stack[n-1].object {
				stack[n-1].wantKey = true
			}
		case '"':
			start := i
			end, escaped := stringEnd(in, i+1)
			i = end
			n := len(stack)
			if n == 0 || !stack[n-1].object || !stack[n-1].wantKey || end >= len(in) {
				continue
			}
			f := &stack[n-1]
			f.wantKey = false
			k := in[start+1 : end]
			if escaped {
				var s string
				if json.Unmarshal(in[start:end+1], &s) != nil {
					continue // malformed: the decoder reports it
				}
				k = []byte(s)
			}
			if f.set != nil {
				if _, ok := f.set[string(k)]; ok {
					return string(k), start, true
				}
				f.set[string(k)] = struct{}{}
				continue
			}
			for _, prev := range keys[f.start:] {
				if bytes.Equal(prev, k) {
					return string(k), start, true
				}
			}
			keys = append(keys, k)
			if len(keys)-f.start > 16 {
				f.set = make(map[string]struct{}, 64)
				for _, prev := range keys[f.start:] {
					f.set[string(prev)] = struct{}{}
				}
				keys = keys[:f.start]
			}
		}
	}
	return "", 0, false
}

// stringEnd returns the index of the quote closing the string whose body starts at i (len(in)
// when it is unterminated), and whether the body holds an escape.
func stringEnd(in []byte, i int) (end int, escaped bool) {
	for {
		j := bytes.IndexByte(in[i:], '"')
		if j < 0 {
			return len(in), escaped
		}
		if bytes.IndexByte(in[i:i+j], '\\') < 0 {
			return i + j, escaped
		}
		escaped = true
		for k := i; k < i+j; k++ { // find the first backslash, step over what it escapes
			if in[k] == '\\' {
				i = k + 2
				break
			}
		}
		if i > len(in) {
			return len(in), true
		}
	}
}
