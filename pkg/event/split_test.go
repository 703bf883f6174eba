package event

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

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
	`{"type":"ADDED","object":{"metadata":{"name":"a","uid":"u"},"metadata":{"uid":null,"n\u0061me":"b"},"kind":"K\u0069nd"}}`,
	`{"type":"ADDED","object":{"metadata":{"annotations":{"k8s.io/initial-events-end":"true"},"name":1}}}`,
	`{"type":"ADDED","object":{"metadata":null,"metadata":{"name":"a"},"metadata":[]}}`,
	`{"type":"ADDED","object":{"a":1},"kind":5}`, `{"type":"ADDED","object":{"a":1},"kind":"Foo"}`,
	`{"type":"ADDED","object":{},"Kind":"WatchEvent","apiVersion":"v1"}`, `{"type":"ADDED","object":{},"\u212Aind":"Foo"}`,
	`{"type":"ADDED","object":{},"APIVERSION":null}`,
}

// FuzzSplitJSONEvent holds indexEvent to apimachinery's decoding: when it
// accepts an event, apimachinery must accept it too, with the same type
// and the same object bytes, and the object's metadata read from the
// members it listed must equal readMeta's walk of the object.
func FuzzSplitJSONEvent(f *testing.F) {
	for _, s := range splitSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkIndexEvent(t, data)
	})
}

// checkIndexEvent compares indexEvent's reading of data with
// apimachinery's and readMeta's.
func checkIndexEvent(t *testing.T, data []byte) {
	t.Helper()
	x, ok := indexEvent(data, nil, nil)
	if !ok {
		return
	}
	wantTyp, wantObj, err := referenceWatchEvent(data)
	if err != nil {
		t.Fatalf("indexEvent accepted %q, apimachinery: %v", data, err)
	}
	if x.typ != wantTyp || !bytes.Equal(x.obj, wantObj) {
		t.Fatalf("indexEvent %q: type %q object %q, apimachinery: type %q object %q", data, x.typ, x.obj, wantTyp, wantObj)
	}
	if !x.indexed {
		return
	}
	var got, want objectMeta
	gotErr, wantErr := readMetaMembers(&x, &got), readMeta(x.obj, &want)
	if got != want || (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
		t.Fatalf("object %q: from its members %+v, %v; walked %+v, %v", x.obj, got, gotErr, want, wantErr)
	}
}

// FuzzIndexEventValid holds indexEvent's validation to encoding/json's:
// any value as an event's object is accepted exactly when the event is
// valid JSON (nesting aside, which TestSplitJSONEventDepth checks), but
// for the events indexEvent leaves to apimachinery by design (a value may
// close the object and add members to the event).
func FuzzIndexEventValid(f *testing.F) {
	for _, s := range validitySeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`0,"\b":0`))
	f.Add([]byte(`0,"Kind":"x"`))
	f.Fuzz(func(t *testing.T, v []byte) {
		if bytes.Count(v, []byte{'{'})+bytes.Count(v, []byte{'['}) >= maxNestingDepth-1 {
			return
		}
		data := append(append([]byte(`{"type":"ADDED","object":`), v...), '}')
		_, ok := indexEvent(data, nil, nil)
		if valid := json.Valid(data); ok != valid && !(valid && leftToApimachinery(data)) {
			t.Fatalf("indexEvent(%q) ok = %v, json.Valid = %v", data, ok, valid)
		}
		checkIndexEvent(t, data)
	})
}

// leftToApimachinery reports whether the valid JSON event data has a
// member indexEvent leaves to apimachinery: a key written with escapes, or
// kind or apiVersion in any letter case (client-go reads the event's own
// type from those).
func leftToApimachinery(data []byte) bool {
	left := false
	_, _ = walkObject(data, func(key, _ []byte) bool {
		left = left || bytes.IndexByte(key, '\\') >= 0 || bytes.EqualFold(key, []byte("kind")) || bytes.EqualFold(key, []byte("apiVersion"))
		return true
	})
	return left
}

// validitySeeds are values valid and not, at the edges of RFC 8259's
// grammar.
var validitySeeds = []string{
	`{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `-0.5e+10`, `1E9`, `1.`, `.5`, `01`, `-`, `1e`, `1e+`, `+1`,
	`"a\"b\\"`, `"\u00e9\ud800"`, `"\u00zz"`, `"\x"`, "\"a\x01\"", "\"a\x7f\"", "\"\xff\xfe\"", `"\/"`,
	`{"a":1,"b":[1,2,{"c":null}]}`, `{"a":1,}`, `[1,]`, `{"a" 1}`, `{"a":1 "b":2}`, `{1:2}`, `[1 2]`,
	` { "a" : [ 1 , 2 ] } `, "{\"a\":\t1\r\n}", `tru`, `nul`, `falsey`, `{"a":nulll}`, `"abc`, `{"a"`, `[`,
	`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"},"data":{"k":"` + strings.Repeat("x", 40) + `"}}`,
}

// TestSplitJSONEvent checks which events take the one-pass reading (the
// ones real servers send must, or the fast path is not used) and that the
// rest fall back.
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
		{"{\"type\":\t\"ADDED\",\r\n\"object\":{\"a\":[1]}}\n", true, "ADDED", `{"a":[1]}`, "whitespace between tokens"},
		{`{"type":"ADDED","type":"MODIFIED","object":{"a":1},"object":{"b":2}}`, true, "MODIFIED", `{"b":2}`, "last key wins"},
		{`{"type":"ADDED","type":null,"object":{"a":1},"object":null}`, true, "ADDED", `{"a":1}`, "null keeps the value"},
		{`{"type":"ADDED","object":null}`, true, "ADDED", "", "null object"},
		{`{"Type":"ADDED","OBJECT":{}}`, true, "", "", "keys are case-sensitive"},
		{`{"\u0074ype":"ADDED","object":{}}`, false, "", "", "escaped key: apimachinery decides"},
		{`{"type":"ADD\u0045D","object":{}}`, false, "", "", "escaped type: apimachinery decides"},
		{`{"type":1,"object":{}}`, false, "", "", "type not a string"},
		{`{"type":"ADDED","object":{"n":01}}`, false, "", "", "invalid number in the object"},
		{"{\"type\":\"ADDED\",\"object\":{\"s\":\"a\x01\"}}", false, "", "", "control byte in a string"},
		{`{"type":"ADDED","object":{"a":1},}`, false, "", "", "trailing comma"},
		{`{"type":"ADDED","object":{"a":1}`, false, "", "", "not closed"},
		{`{"type":"ADDED","object":{"a":1}}}`, false, "", "", "closed twice"},
		{`{"type":"ADDED","object":{}} {}`, false, "", "", "two values"},
		{`[]`, false, "", "", "not an object"},
		{`{"type":"ADDED","object":{"a":1},"kind":5}`, false, "", "", "a kind of the event's own: apimachinery decides (client-go rejects this one)"},
		{`{"type":"ADDED","object":{},"ApiVersion":"v1"}`, false, "", "", "an apiVersion of the event's own, any letter case"},
	} {
		x, ok := indexEvent([]byte(tc.in), nil, nil)
		if ok != tc.ok || x.typ != tc.typ || string(x.obj) != tc.object {
			t.Errorf("%s: indexEvent(%q) = %q, %q, %v; want %q, %q, %v", tc.comment, tc.in, x.typ, x.obj, ok, tc.typ, tc.object, tc.ok)
		}
		if !tc.ok {
			continue
		}
		rt, ro, err := referenceWatchEvent([]byte(tc.in))
		if err != nil || rt != x.typ || !bytes.Equal(ro, x.obj) {
			t.Errorf("%s: apimachinery reads %q as %q, %q, %v", tc.comment, tc.in, rt, ro, err)
		}
	}
}

// TestIndexEventMembers checks the object's members indexEvent lists: in
// order, values as written, the metadata's too (each "metadata" its own),
// none for an object past maxIndexedMembers or an object that is not one.
func TestIndexEventMembers(t *testing.T) {
	x, ok := indexEvent([]byte(`{"type":"ADDED","object":{"kind":"Pod", "metadata" : {"name":"a", "uid":"u"},"data":{"k":[1,{"x":2}]},"z":null,"metadata":{"namespace":{"n":1}}}}`), nil, nil)
	if !ok || !x.indexed {
		t.Fatalf("indexEvent: ok %v, indexed %v", ok, x.indexed)
	}
	var got []string
	for _, m := range x.members {
		got = append(got, string(m.key(x.doc))+"="+string(m.value(x.doc)))
		for _, s := range x.metas[m.sub:m.subEnd] {
			got = append(got, "  "+string(s.key(x.doc))+"="+string(s.value(x.doc)))
		}
		if m.subIndexed != (string(m.key(x.doc)) == "metadata") {
			t.Errorf("member %s: subIndexed %v", m.key(x.doc), m.subIndexed)
		}
	}
	if want := []string{`kind="Pod"`, `metadata={"name":"a", "uid":"u"}`, `  name="a"`, `  uid="u"`, `data={"k":[1,{"x":2}]}`, `z=null`,
		`metadata={"namespace":{"n":1}}`, `  namespace={"n":1}`}; strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("members\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var many strings.Builder
	many.WriteString(`{"type":"ADDED","object":{`)
	for i := range maxIndexedMembers + 1 {
		fmt.Fprintf(&many, `"k%d":%d,`, i, i)
	}
	many.WriteString(`"kind":"Pod"}}`)
	if x, ok := indexEvent([]byte(many.String()), nil, nil); !ok || x.indexed {
		t.Errorf("%d members: ok %v, indexed %v; want true, false", maxIndexedMembers+2, ok, x.indexed)
	}
	meta := strings.Replace(strings.Replace(many.String(), `{"type":"ADDED","object":{`, `{"type":"ADDED","object":{"metadata":{`, 1), `}}`, `}}}`, 1)
	if x, ok := indexEvent([]byte(meta), nil, nil); !ok || !x.indexed || len(x.members) != 1 || x.members[0].subIndexed {
		t.Errorf("metadata of %d members: ok %v, indexed %v; want true, true, and the metadata not indexed", maxIndexedMembers+2, ok, x.indexed)
	}
	for _, in := range []string{`{"type":"ADDED","object":[{"a":1}]}`, `{"type":"ADDED","object":"x"}`} {
		if x, ok := indexEvent([]byte(in), nil, nil); !ok || x.indexed {
			t.Errorf("%s: ok %v, indexed %v; want true, false", in, ok, x.indexed)
		}
	}
	if x, ok := indexEvent([]byte(`{"type":"ADDED","object":{"a":1},"object":{}}`), nil, nil); !ok || !x.indexed || len(x.members) != 0 {
		t.Errorf("last object empty: ok %v, indexed %v, %d members", ok, x.indexed, len(x.members))
	}
	if x, ok := indexEvent([]byte(`{"type":"ADDED","object":{"a":1},"object":null}`), nil, nil); !ok || !x.indexed || len(x.members) != 1 || string(x.members[0].value(x.doc)) != "1" {
		t.Errorf("a null object after one: ok %v, indexed %v, %d members; want the first object's", ok, x.indexed, len(x.members))
	}
}

// TestSplitJSONEventDepth: indexEvent leaves a document nested deeper than
// apimachinery accepts (10000 levels, counting the event) to apimachinery.
func TestSplitJSONEventDepth(t *testing.T) {
	nested := func(levels int) []byte {
		return []byte(`{"type":"ADDED","object":` + strings.Repeat("[", levels) + strings.Repeat("]", levels) + `}`)
	}
	for _, levels := range []int{maxNestingDepth - 2, maxNestingDepth - 1, maxNestingDepth, 1 << 20} {
		data := nested(levels)
		_, ok := indexEvent(data, nil, nil)
		_, _, err := referenceWatchEvent(data)
		if ok && err != nil {
			t.Errorf("%d levels: indexEvent accepted what apimachinery rejects: %v", levels, err)
		}
		if want := levels < maxNestingDepth; ok != want {
			t.Errorf("%d levels: indexEvent ok = %v, want %v", levels, ok, want)
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
		if f := kindFlagsOf(got.Kind); got.Kinds&f != f {
			t.Fatalf("readMeta(%q): kind %q, but its flags %b are not in Kinds %b", raw, got.Kind, f, got.Kinds)
		}
		got.Kinds = 0 // a superset of what apimachinery reads; FuzzRedact checks it
		var ref metav1.PartialObjectMetadata
		if sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &ref) != nil {
			return
		}
		want := objectMeta{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, Namespace: ref.Namespace,
			UID: string(ref.UID), ResourceVersion: ref.ResourceVersion,
			InitialEventsEnd: ref.Annotations[InitialEventsEndAnnotation] == "true"}
		got.Rows, got.OtherRows = "", false // a Table's rows, not in PartialObjectMetadata
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

// naiveStrictString is strictString one byte at a time, as encoding/json's
// scanner reads a string.
func naiveStrictString(p []byte, i int) (int, bool, bool) {
	esc := false
	for ; i < len(p); i++ {
		switch b := p[i]; {
		case b == '"':
			return i, esc, true
		case b < 0x20:
			return 0, false, false
		case b == '\\':
			esc = true
			if i+1 >= len(p) {
				return 0, false, false
			}
			switch p[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+6 > len(p) {
					return 0, false, false
				}
				for _, h := range p[i+2 : i+6] {
					if !strings.ContainsRune("0123456789abcdefABCDEF", rune(h)) {
						return 0, false, false
					}
				}
				i += 5
			default:
				return 0, false, false
			}
		}
	}
	return 0, false, false
}

// TestStrictString compares strictString with naiveStrictString from every
// start of inputs with quotes, escapes, control bytes and the bytes one
// off from them.
func TestStrictString(t *testing.T) {
	alphabet := []string{"a", `"`, `\\`, `\"`, `\u00e9`, `\u0G00`, `\x`, `\`, "\x00", "\x1f", "\x20", "\x21", "\x5b", "\x5d", "\x7f", "\x80", "\xe0", "\xff", "\n"}
	rng := uint64(11)
	for n := 0; n < 120; n += 1 + n/20 {
		for trial := 0; trial < 60; trial++ {
			p := randomText(&rng, n, 200, []string{"a"}, alphabet)
			for start := 0; start <= len(p); start++ {
				checkStrictString(t, p, start)
			}
		}
	}
	// Long strings whose plain runs reach the vector search, cut by
	// escapes, escaped quotes and control bytes at any distance: the
	// search's remembered quote and backslash must never skip one.
	long := []string{strings.Repeat("a", 40), strings.Repeat("b", 300), `\n`, `\"`, `\\`, `\u0041`, `"`, "\x01", "\x80", "a", `\`}
	for trial := 0; trial < 3000; trial++ {
		p := randomText(&rng, 1+int(rng>>40)%1500, 40, long[:3], long)
		for start := 0; start <= len(p); start += 1 + start/8 {
			checkStrictString(t, p, start)
		}
	}
}

// checkStrictString holds strictString to naiveStrictString on p from start.
func checkStrictString(t *testing.T, p []byte, start int) {
	t.Helper()
	j, esc, ok := strictString(p, start)
	wj, wesc, wok := naiveStrictString(p, start)
	if j != wj || esc != wesc || ok != wok {
		t.Fatalf("strictString(%q, %d) = %d, %v, %v; want %d, %v, %v", p, start, j, esc, ok, wj, wesc, wok)
	}
}

// randomText returns at least n bytes of pieces drawn with rng (a linear
// congruential generator's state): one of plain with odds plainOdds in
// 256, else one of alphabet.
func randomText(rng *uint64, n int, plainOdds uint64, plain, alphabet []string) []byte {
	var p []byte
	for len(p) < n {
		*rng = *rng*6364136223846793005 + 1442695040888963407
		if *rng>>56 < plainOdds {
			p = append(p, plain[(*rng>>32)%uint64(len(plain))]...)
		} else {
			p = append(p, alphabet[(*rng>>32)%uint64(len(alphabet))]...)
		}
	}
	return p
}

// TestPlainText holds plainText to what it stands for: no backslash, and
// valid UTF-8, on strings of every length around its eight-byte steps.
func TestPlainText(t *testing.T) {
	alphabet := []string{"a", "Z", `\`, "\x7f", "\x80", "\xc3\xa9", "\xc3", "\xe2\x82\xac", "\xff", "\x00", `"`}
	rng := uint64(5)
	for n := 0; n < 40; n++ {
		for trial := 0; trial < 200; trial++ {
			b := randomText(&rng, n, 160, []string{"a"}, alphabet)
			want := bytes.IndexByte(b, '\\') < 0 && utf8.Valid(b)
			if got := plainText(b); got != want {
				t.Fatalf("plainText(%q) = %v, want %v", b, got, want)
			}
		}
	}
}
