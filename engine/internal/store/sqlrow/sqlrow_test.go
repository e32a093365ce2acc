package sqlrow

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// row scans its values into the destinations, as a driver does: nil leaves a *[]byte nil and
// a **string nil (NULL).
type row []any

func (r row) Scan(dest ...any) error {
	for i, d := range dest {
		if r[i] == nil {
			continue
		}
		reflect.ValueOf(d).Elem().Set(reflect.ValueOf(r[i]))
	}
	return nil
}

func runRow(errJSON []byte, parent *string) row {
	return row{"r1", "wf", []byte(`{}`), "h", nil, "failed", errJSON, "api", nil, nil, 2, 1,
		int64(1e9), int64(2e9), int64(0), parent, nil, nil}
}

func TestRunDecodesNullsTimesAndProgress(t *testing.T) {
	p := "parent"
	r, err := Run(runRow([]byte(`{"kind":"error","message":"boom"}`), &p))
	if err != nil {
		t.Fatal(err)
	}
	if r.ParentRunID != "parent" || r.ParentStepKey != "" || r.Inputs != nil || r.EnvAllow != nil || r.Priority != nil {
		t.Fatalf("nulls: %+v", r)
	}
	if r.Error == nil || r.Error.Message != "boom" {
		t.Fatalf("error: %+v", r.Error)
	}
	if !r.CreatedAt.Equal(time.Unix(1, 0)) || r.CreatedAt.Location() != time.UTC || !r.FinishedAt.IsZero() {
		t.Fatalf("times: %v %v", r.CreatedAt, r.FinishedAt)
	}
	if r.Progress.Completed != 2 || r.Progress.Total != 2 { // total is at least completed
		t.Fatalf("progress: %+v", r.Progress)
	}
}

// A stored priority (the run's own) reads as a pointer to it; NULL as nil (above).
func TestRunReadsItsOwnPriority(t *testing.T) {
	rr := runRow(nil, nil)
	own := int64(-50)
	rr[len(rr)-1] = &own
	r, err := Run(rr)
	if err != nil || r.Priority == nil || *r.Priority != -50 {
		t.Fatalf("Run = %+v, %v; want priority -50", r.Priority, err)
	}
}

func TestRunWithABadStoredErrorNamesTheRun(t *testing.T) {
	_, err := Run(runRow([]byte(`{not json`), nil))
	if err == nil || !strings.Contains(err.Error(), "run r1: decoding its error") {
		t.Fatalf("err = %v", err)
	}
}

func TestStepReadsEmptyLogsAsNil(t *testing.T) {
	empty := ""
	w := "engine-2"
	st, err := Step(row{"a", "a", "tool", "completed", 1, []byte(`{"x":1}`), nil, "", "", "", false,
		int64(5), int64(6), int64(6), &w, &empty, 0, nil}, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if st.RunID != "r1" || st.Worker != "engine-2" || st.Logs != nil || st.Progress != nil || string(st.Output) != `{"x":1}` || st.FileRefs != nil {
		t.Fatalf("step: %+v", st)
	}
}
