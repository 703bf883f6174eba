package diff

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/kwatch/kwatch/pkg/record"
)

func TestDiffer(t *testing.T) {
	var got []*record.Event
	d := New(record.SinkFunc(func(r record.Record) {
		if e, ok := r.(*record.Event); ok {
			got = append(got, e)
		}
	}), Options{})
	obj := func(rv, data string) []byte {
		return []byte(`{"kind":"ConfigMap","metadata":{"name":"a","namespace":"n","uid":"u1","resourceVersion":"` + rv +
			`","managedFields":[{"manager":"m` + rv + `"}],"labels":{"x":"1"}},"data":` + data + `}`)
	}
	for _, e := range []*record.Event{
		{Type: "ADDED", Namespace: "n", Name: "a", UID: "u1", Object: obj("1", `{"k":"v1","gone":"z"}`)},
		{Type: "MODIFIED", Namespace: "n", Name: "a", UID: "u1", Object: obj("2", `{"k":"v2","new":"y"}`)},
		{Type: "MODIFIED", Namespace: "n", Name: "a", UID: "u1", Object: obj("3", `{"k":"v2","new":"y"}`)},
		{Type: "DELETED", Namespace: "n", Name: "a", UID: "u1", Object: obj("4", `{"k":"v2","new":"y"}`)},
		{Type: "MODIFIED", Namespace: "n", Name: "a", UID: "u1", Object: obj("5", `{}`)}, // after DELETED: no previous version
	} {
		d.Emit(e)
	}
	if s := string(got[1].Diff); s != `{"data":{"gone":null,"k":"v2","new":"y"}}` {
		t.Errorf("merge patch %s", s)
	}
	if s := strings.Join(got[1].Changes, "\n"); s != "- data.gone: \"z\"\n~ data.k: \"v1\" → \"v2\"\n+ data.new: \"y\"" {
		t.Errorf("changes:\n%s", s)
	}
	if string(got[2].Diff) != `{}` || len(got[2].Changes) != 0 {
		t.Errorf("only resourceVersion and managedFields changed, which are hidden: %s %v", got[2].Diff, got[2].Changes)
	}
	if got[0].Diff != nil || got[4].Diff != nil {
		t.Errorf("ADDED and an object without a known previous version have no diff")
	}

	var all []*record.Event
	d = New(record.SinkFunc(func(r record.Record) { all = append(all, r.(*record.Event)) }), Options{All: true})
	d.Emit(&record.Event{Type: "ADDED", Namespace: "n", Name: "a", UID: "u1", Object: obj("1", `{}`)})
	d.Emit(&record.Event{Type: "MODIFIED", Namespace: "n", Name: "a", UID: "u1", Object: obj("2", `{}`)})
	if s := strings.Join(all[1].Changes, "\n"); !strings.Contains(s, `~ metadata.resourceVersion: "1" → "2"`) {
		t.Errorf("--diff-all changes:\n%s", s)
	}
}

// TestDifferForgetsOldest: past MaxObjects, the versions remembered first
// are forgotten (their next change has nothing to diff with), the others
// kept; a DELETED forgets its object, wherever it is in the order.
func TestDifferForgetsOldest(t *testing.T) {
	var last *record.Event
	d := New(record.SinkFunc(func(r record.Record) { last = r.(*record.Event) }), Options{})
	ev := func(typ string, i int) *record.Event {
		name := fmt.Sprint("cm-", i)
		return &record.Event{Type: typ, Namespace: "n", Name: name, UID: name,
			Object: []byte(`{"kind":"ConfigMap","metadata":{"name":"` + name + `"},"data":{"k":"` + typ + `"}}`)}
	}
	for i := range MaxObjects + 2 {
		d.Emit(ev("ADDED", i))
	}
	d.Emit(ev("DELETED", 5000))
	if len(d.last) != MaxObjects-1 || d.order.Len() != MaxObjects-1 {
		t.Fatalf("%d objects kept (%d in order), want %d", len(d.last), d.order.Len(), MaxObjects-1)
	}
	for _, c := range []struct {
		i    int
		diff bool
	}{{2, true}, {MaxObjects + 1, true}, {5000, false}, {0, false}, {1, false}} { // each MODIFIED is remembered in turn
		d.Emit(ev("MODIFIED", c.i))
		if (last.Diff != nil) != c.diff {
			t.Errorf("object %d: diff %s, want one: %v", c.i, last.Diff, c.diff)
		}
	}
}

// BenchmarkDifferManyObjects measures remembering ADDED events of more
// distinct objects than MaxObjects (a watch of every pod of a large
// cluster), per event: forgetting the oldest takes constant time.
func BenchmarkDifferManyObjects(b *testing.B) {
	d := New(record.SinkFunc(func(record.Record) {}), Options{All: true})
	obj := []byte(`{"kind":"ConfigMap","metadata":{"name":"x"}}`)
	for i := 0; i < b.N; i++ {
		name := strconv.Itoa(i)
		d.Emit(&record.Event{Type: "ADDED", Namespace: "n", Name: name, UID: name, Object: obj})
	}
}
