package diff

import (
	"encoding/json"
	"fmt"
	"os"
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

// TestDifferWireValues: values are compared as sent, found by a hostile
// trial of the map-based patch before: a number past 2^53 that changed, a
// member set to null (not removed), keys in another order or duplicated
// (the last counts, as encoding/json reads them), the same value spaced
// otherwise, and a long string changed near its end (the line shows where).
func TestDifferWireValues(t *testing.T) {
	corefile := `".:53 {\n    errors\n    health {\n       lameduck 5s\n    }\n    ready\n    cache 30\n    loop\n}\n"`
	for _, c := range []struct {
		name, old, cur, patch, lines string
	}{
		{"big number", `{"n":9007199254740993}`, `{"n":9007199254740992}`,
			`{"data":{"n":9007199254740992}}`, `~ data.n: 9007199254740993 → 9007199254740992`},
		{"null", `{"n":"x"}`, `{"n":null}`, `{"data":{"n":null}}`, `~ data.n: "x" → null`},
		{"removed", `{"n":"x"}`, `{}`, `{"data":{"n":null}}`, `- data.n: "x"`},
		{"key order", `{"a":1,"b":{"c":2,"d":3}}`, `{"b":{"d":3,"c":2},"a":1}`, `{}`, ``},
		{"duplicate keys", `{"a":1,"a":2}`, `{"a":2}`, `{}`, ``},
		{"spacing", `{"a":[1,2]}`, `{"a":[ 1, 2 ]}`, `{}`, ``},
		{"html and unicode kept", `{"a":"<b>"}`, `{"a":"<i>é"}`, `{"data":{"a":"<i>é"}}`, `~ data.a: "<b>" → "<i>é"`},
		{"long string", `{"Corefile":` + corefile + `}`, `{"Corefile":` + strings.Replace(corefile, "cache 30", "cache 300", 1) + `}`,
			`{"data":{"Corefile":` + strings.Replace(corefile, "cache 30", "cache 300", 1) + `}}`,
			`~ data.Corefile: … ready\n    cache 30\n    loop\n}\n" → … ready\n    cache 300\n    loop\n}\n"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []*record.Event
			d := New(record.SinkFunc(func(r record.Record) { got = append(got, r.(*record.Event)) }), Options{})
			obj := func(data string) []byte {
				return []byte(`{"kind":"ConfigMap","metadata":{"name":"a","namespace":"n"},"data":` + data + `}`)
			}
			d.Emit(&record.Event{Type: "ADDED", Namespace: "n", Name: "a", Object: obj(c.old)})
			d.Emit(&record.Event{Type: "MODIFIED", Namespace: "n", Name: "a", Object: obj(c.cur)})
			if p, l := string(got[1].Diff), strings.Join(got[1].Changes, "\n"); p != c.patch || l != c.lines {
				t.Errorf("patch %s\nlines %s\nwant %s\n%s", p, l, c.patch, c.lines)
			}
		})
	}
}

// TestDifferKeyParts: objects whose key parts would join the same way
// ("a/b" + "c", "a" + "b/c") are not diffed against each other.
func TestDifferKeyParts(t *testing.T) {
	var last *record.Event
	d := New(record.SinkFunc(func(r record.Record) { last = r.(*record.Event) }), Options{})
	d.Emit(&record.Event{Type: "ADDED", Namespace: "a/b", Name: "c", Object: []byte(`{"metadata":{"name":"c"}}`)})
	d.Emit(&record.Event{Type: "MODIFIED", Namespace: "a", Name: "b/c", Object: []byte(`{"metadata":{"name":"b/c"}}`)})
	if last.Diff != nil {
		t.Errorf("diffed against another object: %s", last.Diff)
	}
}

// TestDifferBounds: an event shows at most MaxChangeLines change lines and
// counts the others; a path nested deep is shortened in its middle; an
// object of more than MaxMembers members is neither diffed nor kept.
func TestDifferBounds(t *testing.T) {
	var last *record.Event
	d := New(record.SinkFunc(func(r record.Record) { last = r.(*record.Event) }), Options{})
	keys := func(v string) []byte {
		var b strings.Builder
		b.WriteString(`{"data":{`)
		for i := range MaxChangeLines + 50 {
			fmt.Fprintf(&b, `%s"k%d":%s`, map[bool]string{true: ",", false: ""}[i > 0], i, v)
		}
		b.WriteString(`}}`)
		return []byte(b.String())
	}
	d.Emit(&record.Event{Type: "ADDED", Name: "many", Object: keys("0")})
	d.Emit(&record.Event{Type: "MODIFIED", Name: "many", Object: keys("1")})
	if len(last.Changes) != MaxChangeLines || last.MoreChanges != 50 || strings.Count(string(last.Diff), ":1") != MaxChangeLines+50 {
		t.Errorf("%d lines, %d more, patch %d bytes; want %d lines, 50 more, every change in the patch", len(last.Changes), last.MoreChanges, len(last.Diff), MaxChangeLines)
	}

	deep := func(v string) []byte {
		return []byte(strings.Repeat(`{"level":`, 500) + v + strings.Repeat(`}`, 500))
	}
	d.Emit(&record.Event{Type: "ADDED", Name: "deep", Object: deep("1")})
	d.Emit(&record.Event{Type: "MODIFIED", Name: "deep", Object: deep("2")})
	if len(last.Changes) != 1 || len(last.Changes[0]) > maxPathBytes+20 || !strings.HasPrefix(last.Changes[0], "~ level.level.") ||
		!strings.HasSuffix(last.Changes[0], "level.level: 1 → 2") || !strings.Contains(last.Changes[0], "…") {
		t.Errorf("deep path: %q", last.Changes)
	}

	huge := func(v string) []byte {
		return []byte(`{"data":{` + strings.Repeat(`"k":`+v+`,`, MaxMembers) + `"k":` + v + `}}`)
	}
	d.Emit(&record.Event{Type: "ADDED", Name: "huge", Object: huge("0")})
	if _, kept := d.last[d.key(nil, 0, "", "", "", "huge", "")]; kept {
		t.Errorf("an object of more than MaxMembers members is kept")
	}
	d.Emit(&record.Event{Type: "MODIFIED", Name: "huge", Object: huge("1")})
	if last.Diff != nil {
		t.Errorf("an object of more than MaxMembers members is diffed")
	}
}

// TestDifferLineText: change lines from a second hostile trial: keys that
// print alike are told apart, a window never starts inside an escape, and
// bytes that are no UTF-8 neither empty a window nor lift the path bound.
func TestDifferLineText(t *testing.T) {
	noUTF8 := strings.Repeat("\x80", 200)
	for _, c := range []struct {
		name, old, cur string
		want           []string
	}{
		{"keys alike", `{"\u2028":"1","\\u2028":"1","n\nk":"1","n\\nk":"1"}`, `{"\u2028":"2","\\u2028":"2","n\nk":"2","n\\nk":"2"}`,
			[]string{`~ data["\\u2028"]: "1" → "2"`, `~ data["n\nk"]: "1" → "2"`, `~ data["n\\nk"]: "1" → "2"`, `~ data["\u2028"]: "1" → "2"`}},
		{"escape not cut", `{"k":"` + strings.Repeat(`\u00e9`, 20) + `a"}`, `{"k":"` + strings.Repeat(`\u00e9`, 20) + `b"}`,
			[]string{`~ data.k: …\u00e9\u00e9\u00e9\u00e9a" → …\u00e9\u00e9\u00e9\u00e9b"`}},
		{"no UTF-8", `{"k":"` + noUTF8 + `1"}`, `{"k":"` + noUTF8 + `2"}`,
			// (20 bytes of context, 3 more for a character they might start in)
			[]string{`~ data.k: …` + strings.Repeat("\x80", 23) + `1" → …` + strings.Repeat("\x80", 23) + `2"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []*record.Event
			d := New(record.SinkFunc(func(r record.Record) { got = append(got, r.(*record.Event)) }), Options{})
			d.Emit(&record.Event{Type: "ADDED", Name: "a", Object: []byte(`{"data":` + c.old + `}`)})
			d.Emit(&record.Event{Type: "MODIFIED", Name: "a", Object: []byte(`{"data":` + c.cur + `}`)})
			if strings.Join(got[1].Changes, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("lines\n%q\nwant\n%q", got[1].Changes, c.want)
			}
		})
	}
	// A key of 1000 bytes that are no UTF-8 is still shortened.
	key := strings.Repeat("\x80", 1000)
	var last *record.Event
	d := New(record.SinkFunc(func(r record.Record) { last = r.(*record.Event) }), Options{})
	d.Emit(&record.Event{Type: "ADDED", Name: "a", Object: []byte(`{"` + key + `":1}`)})
	d.Emit(&record.Event{Type: "MODIFIED", Name: "a", Object: []byte(`{"` + key + `":2}`)})
	if len(last.Changes) != 1 || len(last.Changes[0]) > maxPathBytes+20 {
		t.Errorf("a path of %d bytes", len(last.Changes[0]))
	}
}

// BenchmarkDifferLargeArray measures the diff of an object whose array of
// 100 000 empty objects changed in one element (a hostile trial took 601
// MB of memory for 2 000 000 of them with the map-based patch).
func BenchmarkDifferLargeArray(b *testing.B) {
	d := New(record.SinkFunc(func(record.Record) {}), Options{})
	obj := func(last string) []byte {
		return []byte(`{"spec":{"a":[` + strings.Repeat(`{},`, 100000) + last + `]}}`)
	}
	a, m := obj(`{}`), obj(`{"x":1}`)
	b.SetBytes(int64(len(a)))
	for i := 0; i < b.N; i++ {
		d.Emit(&record.Event{Type: "MODIFIED", Name: "x", Object: a})
		d.Emit(&record.Event{Type: "MODIFIED", Name: "x", Object: m})
	}
}

// TestDifferPerWatch: two watches of one object on one connection (an
// informer's watch-list and a plain Watch on one HTTP/2 connection) each
// diff against what they delivered, not against each other; a watch that
// follows another (a record.Restart, pkg/rewatch's: a resume after a
// reset, on a new connection) diffs against what that one delivered; a
// watch that follows none starts afresh.
func TestDifferPerWatch(t *testing.T) {
	var got []*record.Event
	d := New(record.SinkFunc(func(r record.Record) {
		if e, ok := r.(*record.Event); ok {
			got = append(got, e)
		}
	}), Options{PerWatch: true})
	c1, c2 := &record.Conn{ID: 1}, &record.Conn{ID: 2}
	ev := func(c *record.Conn, exchange int, typ, data string) *record.Event {
		return &record.Event{Conn: c, Exchange: exchange, Type: typ, Namespace: "n", Name: "a", UID: "u1",
			Object: []byte(`{"kind":"ConfigMap","metadata":{"name":"a","namespace":"n","uid":"u1"},"data":` + data + `}`)}
	}
	for _, r := range []record.Record{
		ev(c1, 1, "ADDED", `{"k":"1"}`),    // the informer (stream 1)
		ev(c1, 3, "ADDED", `{"k":"1"}`),    // the plain Watch (stream 3)
		ev(c1, 1, "MODIFIED", `{"k":"2"}`), // 1 → 2 on stream 1
		ev(c1, 3, "MODIFIED", `{"k":"2"}`), // 1 → 2 on stream 3, not 2 → 2
		&record.Restart{Conn: c2, Exchange: 1, Prev: c1, PrevExchange: 3},
		ev(c2, 1, "MODIFIED", `{"k":"3"}`), // the resume of stream 3: 2 → 3
		ev(c2, 5, "MODIFIED", `{"k":"4"}`), // a watch that follows none
	} {
		d.Emit(r)
	}
	for i, want := range []string{"", "", `{"data":{"k":"2"}}`, `{"data":{"k":"2"}}`, `{"data":{"k":"3"}}`, ""} {
		if string(got[i].Diff) != want {
			t.Errorf("event %d (connection %d, exchange %d, %s): diff %s, want %q", i, got[i].Conn.ID, got[i].Exchange, got[i].Type, got[i].Diff, want)
		}
	}
}

// tableEvents reads testdata/kubectl-get-cm-w.json: the watch events
// kubectl 1.30's `get cm -w -n NS` received from kube-apiserver v1.37.2
// (captured by kwatch attach -o json: their type and object as sent)
// while ConfigMap x1 was patched, x2 created, patched (a data key and a
// label added) and deleted; each a Table of one row whose object is a
// PartialObjectMetadata, the first with the columnDefinitions.
func tableEvents(t *testing.T) []*record.Event {
	t.Helper()
	b, err := os.ReadFile("testdata/kubectl-get-cm-w.json")
	if err != nil {
		t.Fatal(err)
	}
	var raw []struct {
		Type   string          `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	c := &record.Conn{ID: 1, HTTP2: true}
	var evs []*record.Event
	for i, r := range raw {
		var row struct {
			Rows []struct {
				Object struct {
					Metadata struct{ Namespace, Name, UID string } `json:"metadata"`
				} `json:"object"`
			} `json:"rows"`
		}
		if err := json.Unmarshal(r.Object, &row); err != nil || len(row.Rows) != 1 {
			t.Fatalf("event %d: %v", i+1, err)
		}
		m := row.Rows[0].Object.Metadata
		evs = append(evs, &record.Event{Conn: c, Exchange: 3, Seq: i + 1, Type: r.Type, APIVersion: "meta.k8s.io/v1", Kind: "Table",
			RowKind: "PartialObjectMetadata", Namespace: m.Namespace, Name: m.Name, UID: m.UID, Object: r.Object})
	}
	return evs
}

// TestDifferTable: a Table event is diffed by its row: its cells by the
// names of the watch's first columnDefinitions (which the later Tables
// do not carry), and its object, the row object's managedFields and
// resourceVersion left out as an object's are.
func TestDifferTable(t *testing.T) {
	d := New(record.SinkFunc(func(record.Record) {}), Options{PerWatch: true})
	evs := tableEvents(t)
	for _, e := range evs {
		d.Emit(e)
	}
	if evs[0].Diff != nil || evs[1].Diff != nil {
		t.Errorf("x1's first version and x2's ADDED have a diff: %s %s", evs[0].Diff, evs[1].Diff)
	}
	for _, tc := range []struct {
		e           *record.Event
		diff, lines string
	}{
		{evs[2], `{"cells":{"Age":"1s","Data":2},"object":{"metadata":{"labels":{"app":"web"}}}}`,
			"~ cells.Age: \"0s\" → \"1s\"\n~ cells.Data: 1 → 2\n+ object.metadata.labels: {\"app\":\"web\"}"},
		{evs[3], `{"cells":{"Age":"4s"}}`, "~ cells.Age: \"1s\" → \"4s\""},
	} {
		if string(tc.e.Diff) != tc.diff || strings.Join(tc.e.Changes, "\n") != tc.lines {
			t.Errorf("event %d: diff %s, changes:\n%s\nwant %s\n%s", tc.e.Seq, tc.e.Diff, strings.Join(tc.e.Changes, "\n"), tc.diff, tc.lines)
		}
	}

	// Joined after the first Table: its cells by index; --diff-all shows
	// the row object's resourceVersion.
	d = New(record.SinkFunc(func(record.Record) {}), Options{All: true})
	evs = tableEvents(t)
	for _, e := range evs[1:] {
		d.Emit(e)
	}
	if got, want := strings.Join(evs[2].Changes, "\n"), "~ cells.1: 1 → 2\n~ cells.2: \"0s\" → \"1s\"\n"; !strings.HasPrefix(got, want) ||
		!strings.Contains(got, "~ object.metadata.resourceVersion: \"5189\" → \"5190\"") {
		t.Errorf("changes without the columnDefinitions, all:\n%s", got)
	}
}

// TestDifferTableRows: a Table of other than one row, or that is not one,
// has no diff and is not kept.
func TestDifferTableRows(t *testing.T) {
	d := New(record.SinkFunc(func(record.Record) {}), Options{})
	ev := func(typ, obj string) *record.Event {
		return &record.Event{Type: typ, APIVersion: "meta.k8s.io/v1", Kind: "Table", Namespace: "n", Name: "a", Object: []byte(obj)}
	}
	for _, e := range []*record.Event{
		ev("ADDED", `{"kind":"Table","rows":[{"cells":["a"]}]}`),
		ev("MODIFIED", `{"kind":"Table","rows":[{"cells":["a"]},{"cells":["b"]}]}`),
		ev("MODIFIED", `{"kind":"Table","rows":[{"cells":["c"]}]}`),
		ev("MODIFIED", `{"kind":"Table","rows":"x"}`),
	} {
		d.Emit(e)
		if e.Diff != nil {
			t.Errorf("%s has a diff: %s", e.Object, e.Diff)
		}
	}
}
