package event

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"
)

// referenceWatchEvent decodes data as client-go's watch decoder does.
func referenceWatchEvent(data []byte) (typ string, object []byte, err error) {
	var we metav1.WatchEvent
	if _, _, err := jsonStream.Decode(data, nil, &we); err != nil {
		return "", nil, err
	}
	return we.Type, we.Object.Raw, nil
}

// splitSeeds are watch events real servers send and the odd ones the
// split must leave to apimachinery or read the same way.
var splitSeeds = []string{
	evA, evB,
	`{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"}}}`,
	` {"object" : {"kind":"Pod"} , "type" : "DELETED" } `,
	`{"type":"ADDED","type":"MODIFIED","object":{"a":1},"object":{"b":2}}`,
	`{"type":"ADDED","type":null,"object":{"a":1},"object":null}`,
	`{"Type":"ADDED","OBJECT":{}}`,
	`{"\u0074ype":"ADDED","object":{}}`,
	`{"type":"ADD\u0045D","object":{}}`,
	`{"type":1,"object":{}}`,
	`{"type":"ADDED","object":"x"}`,
	`{"type":"ADDED","object":[1,2,{"a":"}"}]}`,
	`{"type":"ADDED","object":{"s":"a\"b\\"}}`,
	`{"type":"ADDED","object":{"n":-0.5e+10,"t":true,"f":false,"z":null}}`,
	`{"type":"ADDED","object":{"n":01}}`,
	`{"type":"ADDED","object":{"s":"\u00zz"}}`,
	"{\"type\":\"ADDED\",\"object\":{\"s\":\"a\x01\"}}",
	"{\"type\":\"ADDED\",\"object\":{\"s\":\"\xff\xfe\"}}",
	`{"type":"ADDED","object":{}} {}`,
	`{"type":"ADDED","object":{},}`,
	`{"type":"ADDED" "object":{}}`,
	`{}`, `[]`, `null`, `"ADDED"`, ``, `{`, `{"type"`,
}

// FuzzSplitJSONEvent holds both ways splitJSONEvent splits an event
// (splitObjectLast, splitWalk) to apimachinery's decoding: when one accepts
// an event, apimachinery must accept it too, with the same type and the
// same object bytes.
func FuzzSplitJSONEvent(f *testing.F) {
	for _, s := range splitSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// Both ways of splitting, each on its own: most events take the
		// first, so the second is checked here rather than through it.
		for _, split := range []struct {
			name string
			fn   func([]byte) (string, []byte, bool)
		}{{"splitObjectLast", splitObjectLast}, {"splitWalk", splitWalk}} {
			typ, obj, ok := split.fn(data)
			if !ok {
				continue
			}
			wantTyp, wantObj, err := referenceWatchEvent(data)
			if err != nil {
				t.Fatalf("%s accepted %q, apimachinery: %v", split.name, data, err)
			}
			if typ != wantTyp || !bytes.Equal(obj, wantObj) {
				t.Fatalf("%s %q: type %q object %q, apimachinery: type %q object %q", split.name, data, typ, obj, wantTyp, wantObj)
			}
		}
	})
}

// TestSplitJSONEvent checks which events take the split (the ones real
// servers send must, or the fast path is not used) and that the rest fall
// back.
func TestSplitJSONEvent(t *testing.T) {
	for _, tc := range []struct {
		in      string
		ok      bool
		typ     string
		object  string
		comment string
	}{
		{evA, true, "ADDED", evA[len(`{"type":"ADDED","object":`) : len(evA)-1], "a real event"},
		{` {"object" : {"kind":"Pod"} , "type" : "DELETED" } `, true, "DELETED", `{"kind":"Pod"}`, "order and spaces"},
		{`{"type":"ADDED","type":"MODIFIED","object":{"a":1},"object":{"b":2}}`, true, "MODIFIED", `{"b":2}`, "last key wins"},
		{`{"type":"ADDED","type":null,"object":{"a":1},"object":null}`, true, "ADDED", `{"a":1}`, "null keeps the value"},
		{`{"Type":"ADDED","OBJECT":{}}`, true, "", "", "keys are case-sensitive"},
		{`{"\u0074ype":"ADDED","object":{}}`, false, "", "", "escaped key: apimachinery decides"},
		{`{"type":"ADD\u0045D","object":{}}`, false, "", "", "escaped type: apimachinery decides"},
		{`{"type":1,"object":{}}`, false, "", "", "type not a string"},
		{`{"type":"ADDED","object":{"n":01}}`, false, "", "", "invalid number in the object"},
		{`{"type":"ADDED","object":{}} {}`, false, "", "", "two values"},
		{`[]`, false, "", "", "not an object"},
	} {
		typ, obj, ok := splitJSONEvent([]byte(tc.in))
		if ok != tc.ok || typ != tc.typ || string(obj) != tc.object {
			t.Errorf("%s: splitJSONEvent(%q) = %q, %q, %v; want %q, %q, %v", tc.comment, tc.in, typ, obj, ok, tc.typ, tc.object, tc.ok)
		}
		if !tc.ok {
			continue
		}
		rt, ro, err := referenceWatchEvent([]byte(tc.in))
		if err != nil || rt != typ || !bytes.Equal(ro, obj) {
			t.Errorf("%s: apimachinery reads %q as %q, %q, %v", tc.comment, tc.in, rt, ro, err)
		}
	}
}

// TestSplitObjectLast checks which events take the fast path: those shaped
// as kube-apiserver writes them do; one whose object is not its last
// member goes to splitWalk.
func TestSplitObjectLast(t *testing.T) {
	for _, tc := range []struct {
		in     string
		ok     bool
		typ    string
		object string
	}{
		{evA, true, "ADDED", evA[len(`{"type":"ADDED","object":`) : len(evA)-1]},
		{" {\"type\" : \"BOOKMARK\" , \"object\" : {\"a\":[1]} } ", true, "BOOKMARK", `{"a":[1]}`},
		{`{"type":"ADDED","object":null}`, true, "ADDED", ""},
		{`{"object":{"kind":"Pod"},"type":"DELETED"}`, false, "", ""},
		{`{"type":"ADDED","object":{"a":1},"object":{"b":2}}`, false, "", ""},
		{`{"type":"ADDED","object":{"a":1},}`, false, "", ""},
		{`{"type":"ADDED","object":{"a":1}`, false, "", ""},
		{`{"type":"ADDED","object":{"a":1}}}`, false, "", ""},
	} {
		typ, obj, ok := splitObjectLast([]byte(tc.in))
		if ok != tc.ok || typ != tc.typ || string(obj) != tc.object {
			t.Errorf("splitObjectLast(%q) = %q, %q, %v; want %q, %q, %v", tc.in, typ, obj, ok, tc.typ, tc.object, tc.ok)
		}
	}
}

// TestSplitJSONEventDepth: the split leaves a document nested deeper than
// apimachinery accepts (10000 levels, counting the event) to apimachinery,
// and never recurses that deep itself.
func TestSplitJSONEventDepth(t *testing.T) {
	nested := func(levels int) []byte {
		return []byte(`{"type":"ADDED","object":` + strings.Repeat("[", levels) + strings.Repeat("]", levels) + `}`)
	}
	for _, levels := range []int{maxNestingDepth - 2, maxNestingDepth - 1, maxNestingDepth, 1 << 20} {
		data := nested(levels)
		_, _, ok := splitJSONEvent(data)
		_, _, err := referenceWatchEvent(data)
		if ok && err != nil {
			t.Errorf("%d levels: split accepted what apimachinery rejects: %v", levels, err)
		}
		if want := levels < maxNestingDepth; ok != want {
			t.Errorf("%d levels: split ok = %v, want %v", levels, ok, want)
		}
	}
}

// FuzzReadMeta holds readMeta to apimachinery's decoding of an object's
// type and metadata (sigs.k8s.io/json, case-sensitive): whenever that
// decoding succeeds, readMeta must succeed with the same fields.
func FuzzReadMeta(f *testing.F) {
	for _, s := range []string{
		`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","uid":"u","resourceVersion":"5"},"data":{"k":"[{\"}]"}}`,
		`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"6","annotations":{"k8s.io/initial-events-end":"true"}}}`,
		`{"data":{"x":"y"},"metadata":{"name":"late"},"kind":"Secret","kind":"ConfigMap"}`,
		`{"k\u0069nd":"Secret","metadata":{"Name":"upper","name":"lower","name":null}}`,
		`{"metadata":{"annotations":{"k8s.io/initial-events-end":"true"},"annotations":null}}`,
		`{"metadata":{"name":1}}`, `{"metadata":null,"kind":"\u00e9\ud800"}`, "{\"kind\":\"\xff\"}", `[]`, `"x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return // readMeta only sees validated objects
		}
		var got objectMeta
		err := readMeta(raw, &got)
		if got.Kind == "Secret" && !got.MaybeSecret {
			t.Fatalf("readMeta(%q): kind Secret, but MaybeSecret is false", raw)
		}
		got.MaybeSecret = false // a superset of what apimachinery reads; FuzzRedact checks it
		var ref metav1.PartialObjectMetadata
		if sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &ref) != nil {
			return
		}
		want := objectMeta{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, Namespace: ref.Namespace,
			UID: string(ref.UID), ResourceVersion: ref.ResourceVersion,
			InitialEventsEnd: ref.Annotations[InitialEventsEndAnnotation] == "true"}
		got.Rows = "" // a Table's rows, not in PartialObjectMetadata
		if err != nil || got != want {
			t.Fatalf("readMeta(%q) = %+v, %v; apimachinery reads %+v", raw, got, err, want)
		}
	})
}

// TestIndexSpecial compares indexSpecial with a plain loop at every
// position and length of inputs with quotes, backslashes, and bytes one
// off from them (0x21, 0x5b, 0x5d) or with the high bit set (0xa2, 0xdc).
func TestIndexSpecial(t *testing.T) {
	naive := func(p []byte, nl bool) int {
		for i, b := range p {
			if b == '"' || b == '\\' || (nl && b == '\n') {
				return i
			}
		}
		return -1
	}
	alphabet := []byte{'a', '"', '\\', '\n', 0x21, 0x5b, 0x5d, 0xa2, 0xdc, 0x0b, 0x8a, 0x00, 0xff}
	rng := uint64(1)
	for n := 0; n < 700; n += 1 + n/40 {
		for trial := 0; trial < 200; trial++ {
			p := make([]byte, n)
			for i := range p {
				rng = rng*6364136223846793005 + 1442695040888963407
				if rng>>56 < 250 {
					p[i] = 'a'
				} else {
					p[i] = alphabet[(rng>>32)%uint64(len(alphabet))]
				}
			}
			for _, nl := range []bool{false, true} {
				if got, want := indexSpecial(p, nl), naive(p, nl); got != want {
					t.Fatalf("indexSpecial(%q, %v) = %d, want %d", p, nl, got, want)
				}
			}
		}
	}
}

// naiveScanString is scanString one byte at a time, as RFC 8259 §7 reads
// a string: a backslash takes the byte after it.
func naiveScanString(p []byte, i int, nl bool) (int, bool) {
	for ; i < len(p); i++ {
		switch b := p[i]; {
		case b == '"', nl && b == '\n':
			return i, false
		case b == '\\':
			if i+1 == len(p) {
				return len(p), true
			}
			if nl && p[i+1] == '\n' {
				return i + 1, false
			}
			i++
		}
	}
	return len(p), false
}

// TestScanString compares scanString with naiveScanString from every
// start of inputs dense with quotes, backslashes, newlines and the bytes
// one off from them, and of long plain runs.
func TestScanString(t *testing.T) {
	alphabet := []byte{'a', '"', '\\', '\\', '\\', '\n', 0x21, 0x5b, 0x5d, 0xa2, 0xdc, 0x0b, 0x8a, 0x00, 0xff, 0x23}
	rng := uint64(7)
	for n := 0; n < 400; n += 1 + n/30 {
		for trial := 0; trial < 60; trial++ {
			rng = rng*6364136223846793005 + 1442695040888963407
			dense := rng >> 62 // 0..3: how often a byte is special
			p := make([]byte, n)
			for i := range p {
				rng = rng*6364136223846793005 + 1442695040888963407
				if rng>>56 < 255-dense*60 {
					p[i] = 'a'
				} else {
					p[i] = alphabet[(rng>>32)%uint64(len(alphabet))]
				}
			}
			for start := 0; start <= n; start++ {
				checkScanString(t, p, start)
			}
		}
	}
}

// FuzzScanString holds scanString to naiveScanString on any input.
func FuzzScanString(f *testing.F) {
	f.Add([]byte(`.:53 {\n    errors\n    health\n}\n" tail`), 0)
	f.Add([]byte(`\\\\\\\"abc\\`), 1)
	f.Fuzz(func(t *testing.T, p []byte, start int) {
		if start < 0 || start > len(p) {
			return
		}
		checkScanString(t, p, start)
	})
}

// checkScanString holds scanString to naiveScanString on p from start,
// with and without newlines searched for.
func checkScanString(t *testing.T, p []byte, start int) {
	t.Helper()
	for _, nl := range []bool{false, true} {
		j, esc := scanString(p, start, nl)
		wj, wesc := naiveScanString(p, start, nl)
		if j != wj || esc != wesc {
			t.Fatalf("scanString(%q, %d, %v) = %d, %v, want %d, %v", p, start, nl, j, esc, wj, wesc)
		}
	}
}

// TestHasControl compares hasControl with a plain loop around every byte
// value near the bound, at every position.
func TestHasControl(t *testing.T) {
	for n := 0; n < 20; n++ {
		for pos := 0; pos < n; pos++ {
			for _, b := range []byte{0x00, 0x09, 0x0a, 0x1f, 0x20, 0x21, 0x7f, 0x80, 0x9f, 0xa0, 0xff} {
				p := bytes.Repeat([]byte{'a'}, n)
				p[pos] = b
				if got, want := hasControl(p), b < 0x20; got != want {
					t.Fatalf("hasControl(%q) = %v, want %v", p, got, want)
				}
			}
		}
	}
}
