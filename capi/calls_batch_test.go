package main

import (
	"bytes"
	"encoding/json"
	"fmt"
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
		if err := decodeStrict(&strict, []byte(in)); err != nil {
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
		if err := decodeStrict(&strict, in); err != nil {
			t.Fatalf("%s: taken quickly, refused strictly: %v", in, err)
		}
		if quick.CallID != strict.CallID || !bytes.Equal(quick.Output, strict.Output) || strict.Error != nil ||
			strict.Files != nil || strict.Env != nil || strict.Next != nil {
			t.Fatalf("%s: quick %+v, strict %+v", in, quick, strict)
		}
	})
}

// decodeStrict decodes a calls_complete request the strict way only (decode and check), without
// the quick paths: the reference they are held to.
func decodeStrict(r *completeRequest, in []byte) error {
	if err := decode(in, r); err != nil {
		return err
	}
	return r.check()
}

// sameRequest reports whether two decoded calls_complete requests are the same.
func sameRequest(a, b completeRequest) bool {
	aj, _ := json.Marshal(a)
	bj, _ := json.Marshal(b)
	return bytes.Equal(aj, bj) && bytes.Equal(a.Output, b.Output)
}

// The quick decoding of a calls_complete with its next pull ({"call_id":N,"output":V,"next":X},
// a sequential Python step's answer) gives what the strict decoding gives, X decoded as
// strictly as ever, and takes nothing else.
func TestCompleteQuickNextDecodesAsStrictly(t *testing.T) {
	next := `{"puller":3,"lanes":["main"],"max":1,"timeout_ms":100,"run_id":"r-1","events_after":7}`
	same := []string{
		`{"call_id":1,"output":null,"next":` + next + `}`,
		`{"call_id":42,"output":18,"next":{}}`,
		`{"call_id":7,"output":"a ,\"next\": text","next":` + next + `}`,
		`{"call_id":9,"output":{"f":[1,2,{"g":null}],"next":{"x":1}},"next":` + next + `}`,
		`{"call_id":5,"output":{"next":1},"next":{"run_id":",\"next\":{}"}}`,
	}
	for _, in := range same {
		var quick, strict completeRequest
		ok, err := quick.decodeQuickNext([]byte(in))
		if !ok || err != nil {
			t.Fatalf("%s: not taken by the quick decoding (%v)", in, err)
		}
		if err := decodeStrict(&strict, []byte(in)); err != nil {
			t.Fatalf("%s: strict: %v", in, err)
		}
		if !sameRequest(quick, strict) || quick.Next == nil {
			t.Fatalf("%s: quick %+v, strict %+v", in, quick, strict)
		}
		var viaRequest completeRequest
		if err := viaRequest.decodeRequest([]byte(in)); err != nil || !sameRequest(viaRequest, strict) {
			t.Fatalf("%s: decodeRequest gave %+v (%v)", in, viaRequest, err)
		}
	}
	other := []string{
		`{"call_id":1,"output":1}`,                                   // no next: decodeQuick's shape, not this one
		`{"call_id":1,"output":1,"next":null}`,                       // a null next
		`{"call_id":1,"output":1,"next":{"lanes":"main"}}`,           // a next of the wrong type
		`{"call_id":1,"output":1,"next":{"puller":1,"bogus":2}}`,     // an unknown member of next
		`{"call_id":1,"output":1,"next":{},"env":{}}`,                // next not last
		`{"call_id":1,"output":1,"env":{"A":"b"},"next":{}}`,         // more members
		`{"call_id":1,"output":,"next":{}}`,                          // no value
		`{"call_id":0,"output":1,"next":{}}`,                         // call_id 0
		`{"call_id":1,"output":"x,"next":{}}`,                        // a split inside a string
		`{"call_id":1,"output":{"a":1,"next":{}}`,                    // a split inside an object
		`{"call_id":1,"error":{"kind":"k","message":"m"},"next":{}}`, // an error
	}
	for _, in := range other {
		var r completeRequest
		if ok, _ := r.decodeQuickNext([]byte(in)); ok {
			t.Fatalf("%s: taken by the quick decoding as %+v", in, r)
		}
		if r.CallID != 0 || r.Output != nil || r.Next != nil {
			t.Fatalf("%s: the refused quick decoding left %+v", in, r)
		}
	}
	// Text the strict decoding refuses before decoding (a duplicate key) is refused alike.
	var r completeRequest
	if _, err := r.decodeQuickNext([]byte(`{"call_id":1,"output":{"a":1,"a":2},"next":{}}`)); err == nil {
		t.Fatal("a duplicate key was not refused")
	}
}

// FuzzCompleteQuickNext: a calls_complete request the quick decoding takes is one the strict
// decoding takes too, with the same fields; one it refuses with an error, the strict one refuses.
func FuzzCompleteQuickNext(f *testing.F) {
	for _, s := range []string{
		`{"call_id":1,"output":2,"next":{"max":1}}`, `{"call_id":12,"output":{"a":"}"},"next":{"lanes":["main"]}}`,
		`{"call_id":3,"output":"x","env":{},"next":{}}`, `{"call_id":1,"output":"\",\"next\":{}","next":{}}`,
		`{"call_id":1,"output":{"next":{}},"next":{"run_id":"r"}}`, `{"call_id":1,"output":1,"next":{"x":1}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var quick, strict completeRequest
		ok, err := quick.decodeQuickNext(in)
		strictErr := decodeStrict(&strict, in)
		if err != nil {
			if strictErr == nil {
				t.Fatalf("%s: refused quickly (%v), taken strictly", in, err)
			}
			return
		}
		if !ok {
			return
		}
		if strictErr != nil {
			t.Fatalf("%s: taken quickly, refused strictly: %v", in, strictErr)
		}
		if !sameRequest(quick, strict) {
			t.Fatalf("%s: quick %+v, strict %+v", in, quick, strict)
		}
	})
}

// The decoded "next" of recent requests is kept by text: the same text decodes to the same
// request, each caller gets its own copy, and text that decode refuses is never kept.
func TestNextCacheDecodesEachTextStrictly(t *testing.T) {
	var c nextCache
	text := []byte(`{"puller":3,"lanes":["main"],"max":1,"timeout_ms":100}`)
	a, ok := c.decode(text)
	if !ok || a.Puller != 3 || a.Max != 1 || len(a.Lanes) != 1 {
		t.Fatalf("decoded %+v, %v", a, ok)
	}
	a.Max = 99
	b, ok := c.decode(text)
	if !ok || b.Max != 1 || b == a {
		t.Fatalf("the second decoding gave %+v (the first, changed: %+v)", b, a)
	}
	for range 2 { // refused the first time and again: never kept
		if nr, ok := c.decode([]byte(`{"puller":3,"bogus":1}`)); ok {
			t.Fatalf("an unknown member was taken: %+v", nr)
		}
	}
	for i := range 20 { // more texts than entries: each still decodes to its own request
		nr, ok := c.decode([]byte(fmt.Sprintf(`{"max":%d}`, i)))
		if !ok || nr.Max != i {
			t.Fatalf("text %d decoded to %+v", i, nr)
		}
	}
	if nr, ok := c.decode(text); !ok || nr.Puller != 3 {
		t.Fatalf("after the others: %+v", nr)
	}
}
