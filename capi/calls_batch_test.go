package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

// The quick decoding of a complete_many answer ({"call_id":N,"output":V} only) gives what the
// strict decoding gives, and takes nothing else: any other answer goes through decodeRequest's
// checks as before.
func TestCompleteManyQuickAnswersDecodeAsStrictly(t *testing.T) {
	same := []string{
		`{"call_id":1,"output":null}`,
		`{"call_id":42,"output":18}`,
		`{"call_id":7,"output":"a \"quoted\" } text"}`,
		`{"call_id":9,"output":{"f":[1,2,{"g":null}],"h":"}"}}`,
		`{"call_id":18446744073709551615,"output":[]}`,
	}
	for _, in := range same {
		var quick, strict completeRequest
		if !quick.decodeQuick([]byte(in)) {
			t.Fatalf("%s: not taken by the quick decoding", in)
		}
		if err := strict.decodeRequest([]byte(in)); err != nil {
			t.Fatalf("%s: strict: %v", in, err)
		}
		if quick.CallID != strict.CallID || !bytes.Equal(quick.Output, strict.Output) || quick.Error != nil ||
			quick.Files != nil || quick.Env != nil || quick.Next != nil {
			t.Fatalf("%s: quick %+v, strict %+v", in, quick, strict)
		}
	}
	other := []string{
		`{"call_id":0,"output":1}`,                         // call_id 0: refused by the strict path
		`{"call_id":01,"output":1}`,                        // not a JSON number
		`{"call_id":18446744073709551616,"output":1}`,      // over uint64
		`{"call_id":1,"output":1,"env":{"A":"b"}}`,         // more members
		`{"call_id":1,"output":"x","files":[]}`,            // more members
		`{"call_id":1,"output":{},"output2":{}}`,           // an unknown member
		`{"call_id":1,"error":{"kind":"k","message":"m"}}`, // an error
		`{"Call_ID":1,"output":1}`,                         // another case: the strict decoder's business
		`{"call_id":1}`,                                    // no output
		`{"call_id":1,"output":}`,                          // no value
		`{ "call_id":1,"output":1}`,                        // spaces outside the output
		`{"call_id":1,"output":1,"next":{}}`,               // a next of its own: refused by the strict path
	}
	for _, in := range other {
		var r completeRequest
		if r.decodeQuick([]byte(in)) {
			t.Fatalf("%s: taken by the quick decoding as %+v", in, r)
		}
		if r.CallID != 0 || r.Output != nil {
			t.Fatalf("%s: the refused quick decoding left %+v", in, r)
		}
	}
	// The output is a copy: the request's buffer can be reused.
	in := []byte(`{"call_id":3,"output":"abc"}`)
	var r completeRequest
	if !r.decodeQuick(in) {
		t.Fatal("not taken")
	}
	copy(in, bytes.Repeat([]byte("x"), len(in)))
	if string(r.Output) != `"abc"` {
		t.Fatalf("the output shares the request's buffer: %s", r.Output)
	}
}

// FuzzCompleteManyQuickAnswer: an answer the quick decoding takes (text already checked as the
// request's is: UTF-8, no duplicate key, valid JSON) is one the strict decoding takes too, with
// the same call id and output.
func FuzzCompleteManyQuickAnswer(f *testing.F) {
	for _, s := range []string{
		`{"call_id":1,"output":2}`, `{"call_id":12,"output":{"a":"}"}}`, `{"call_id":3,"output":"x","env":{}}`,
		`{"call_id":1,"output":[1,{"b":null}]}`, `{"call_id":1,"output": 2 }`, `{"call_id":0,"output":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if checkRequestText(in) != nil || !json.Valid(in) {
			return
		}
		var quick, strict completeRequest
		if !quick.decodeQuick(in) {
			return
		}
		if err := strict.decodeRequest(in); err != nil {
			t.Fatalf("%s: taken quickly, refused strictly: %v", in, err)
		}
		if quick.CallID != strict.CallID || !bytes.Equal(quick.Output, strict.Output) || strict.Error != nil ||
			strict.Files != nil || strict.Env != nil || strict.Next != nil {
			t.Fatalf("%s: quick %+v, strict %+v", in, quick, strict)
		}
	})
}
