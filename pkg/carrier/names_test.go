package carrier_test

import (
	"testing"
	"time"

	"github.com/kwatch/kwatch/pkg/carrier"
	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/record"
)

// env keeps what a Body reports.
type env struct {
	events   []*record.Event
	problems []*record.Problem
}

func (e *env) Emit(r record.Record) {
	switch v := r.(type) {
	case *record.Event:
		e.events = append(e.events, v)
	case *record.Problem:
		e.problems = append(e.problems, v)
	}
}
func (e *env) Problem(p *record.Problem) { e.problems = append(e.problems, p) }
func (e *env) Locate(*record.Problem)    {}

// TestCarriersNamed: one event over more carriers than are listed decodes,
// with a warning that names the carriers as the protocol does (chunks,
// DATA frames), and each carrier's share of it.
func TestCarriersNamed(t *testing.T) {
	ev := []byte(`{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"7"}}}` + "\n")
	for _, tc := range []struct {
		name, carriers, kind string
	}{
		{"chunks", "", "watch event in too many chunks"},
		{"frames", "DATA frames", "watch event in too many DATA frames"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &env{}
			var listed []int64
			attach := func(r *record.Event, carried []carrier.Carried) {
				for _, c := range carried {
					listed = append(listed, c.Bytes)
				}
			}
			b := carrier.New(e, carrier.Options{MaxEventCarriers: 2, Carriers: tc.carriers}, attach,
				&record.Conn{ID: 1}, 1, "server", event.FormatJSON, time.Unix(0, 0))
			// Three carriers: 10 bytes, 10 bytes, the rest.
			parts := [][]byte{ev[:10], ev[10:20], ev[20:]}
			for i, p := range parts {
				b.Start(carrier.Carrier{Index: i, Size: int64(len(p))})
				b.Write(p)
			}
			b.Close()
			if len(e.events) != 1 || e.events[0].Type != "ADDED" {
				t.Fatalf("events %+v, want one ADDED", e.events)
			}
			if len(e.problems) != 1 || e.problems[0].Kind != tc.kind || !e.problems[0].Warning {
				t.Fatalf("problems %+v, want one %q warning", e.problems, tc.kind)
			}
			if len(listed) != 2 || listed[0] != 10 || listed[1] != 10 {
				t.Errorf("carriers listed with %v bytes of the event, want [10 10]", listed)
			}
		})
	}
}
