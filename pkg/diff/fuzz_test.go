package diff

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	"github.com/kwatch/kwatch/pkg/record"
)

// FuzzMergePatch holds the Differ's merge patch to RFC 7386 through
// json-patch's MergePatch (the library's application of a patch, a reader
// independent of ours): applied to the old version, the patch must give the
// new one, read as encoding/json reads both (members set to null removed,
// as applying a merge patch removes them).
func FuzzMergePatch(f *testing.F) {
	for _, s := range [][2]string{
		{`{"a":1}`, `{"a":2}`},
		{`{"a":{"b":[1,2],"c":"x"}}`, `{"a":{"b":[1,3]},"d":null}`},
		{`{"a":1,"a":{"x":1}}`, `{"a":{"x":2,"y":"\u00e9"}}`},
		{`{"k\"ey":"v","":{}}`, `{"k\"ey":"w","":{"z":[{}]}}`},
		{`{"n":9007199254740993}`, `{"n":9007199254740992}`},
		{`{"a": [ 1 , 2 ] }`, `{"a":[1,2],"b":true}`},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, old, cur string) {
		var o, c map[string]any
		if json.Unmarshal([]byte(old), &o) != nil || json.Unmarshal([]byte(cur), &c) != nil || o == nil || c == nil {
			return
		}
		var got *record.Event
		d := New(record.SinkFunc(func(r record.Record) { got = r.(*record.Event) }), Options{All: true})
		d.Emit(&record.Event{Type: "ADDED", Name: "x", Object: []byte(old)})
		d.Emit(&record.Event{Type: "MODIFIED", Name: "x", Object: []byte(cur)})
		if got.Diff == nil {
			t.Fatalf("no patch from %s to %s", old, cur)
		}
		if !json.Valid(got.Diff) || bytes.ContainsAny(got.Diff, "\n\r") {
			t.Fatalf("patch %q is not one line of JSON", got.Diff)
		}
		applied, err := jsonpatch.MergePatch([]byte(old), got.Diff)
		if err != nil {
			t.Fatalf("applying %s to %s: %v", got.Diff, old, err)
		}
		var a map[string]any
		if err := json.Unmarshal(applied, &a); err != nil {
			t.Fatal(err)
		}
		if want := withoutNulls(c); !reflect.DeepEqual(a, want) {
			t.Fatalf("%s patched with %s gives %s, want %s", old, got.Diff, applied, cur)
		}
	})
}

// withoutNulls returns v without the object members whose value is null,
// at every depth but inside arrays (which a merge patch replaces whole).
func withoutNulls(v map[string]any) map[string]any {
	out := map[string]any{}
	for k, x := range v {
		switch x := x.(type) {
		case nil:
		case map[string]any:
			out[k] = withoutNulls(x)
		default:
			out[k] = x
		}
	}
	return out
}
