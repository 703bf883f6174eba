package event

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"testing"

	fxcbor "github.com/fxamacker/cbor/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/client-go/kubernetes/scheme"
)

// cborEvent encodes a watch event as kube-apiserver does for
// application/cbor-seq: the object with apimachinery's CBOR serializer,
// embedded in a metav1.WatchEvent encoded the same way.
func cborEvent(t testing.TB, typ string, obj runtime.Object) []byte {
	t.Helper()
	s := cbor.NewSerializer(scheme.Scheme, scheme.Scheme)
	var o, w bytes.Buffer
	if err := s.Encode(obj, &o); err != nil {
		t.Fatal(err)
	}
	if err := s.Encode(&metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: o.Bytes()}}, &w); err != nil {
		t.Fatal(err)
	}
	return w.Bytes()
}

func configMap(name, rv string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: rv}, Data: data}
}

// TestCBORRealBody frames and decodes the body of a CBOR watch-list that
// kube-apiserver v1.37.2 (CBORServingAndStorage on) sent to curl: a
// ConfigMap's ADDED, the initial-events-end BOOKMARK and a MODIFIED, split
// at every byte.
func TestCBORRealBody(t *testing.T) {
	body, err := os.ReadFile("testdata/cbor-watch.bin")
	if err != nil {
		t.Fatal(err)
	}
	want := "0+339 ADDED v1 ConfigMap default/cbor-try rv 75 end=false\n" +
		"339+132 BOOKMARK v1 ConfigMap / rv 75 end=true\n" +
		"471+342 MODIFIED v1 ConfigMap default/cbor-try rv 76 end=false\n"
	for cut := 0; cut < len(body); cut++ {
		var c collected
		fr := c.framer(FormatCBOR, 0)
		fr.Write(body[:cut], 0)
		fr.Write(body[cut:], 1)
		fr.Close()
		var got strings.Builder
		for _, f := range c.frames {
			ev, err := Decode(FormatCBOR, f.Data, DecodeOptions{})
			if err != nil {
				t.Fatalf("cut %d: frame %d: %v", cut, f.Serial, err)
			}
			fmt.Fprintf(&got, "%d+%d %s %s %s %s/%s rv %s end=%v\n", f.Offset, f.Length, ev.Type, ev.APIVersion, ev.Kind,
				ev.Namespace, ev.Name, ev.ResourceVersion, ev.InitialEventsEnd)
		}
		if got.String() != want || len(c.problems) > 0 {
			t.Fatalf("cut %d:\n%s\nwant:\n%s\n%s", cut, got.String(), want, c.String())
		}
		if cut > 0 && cut < 339 && (len(c.frames[0].Spans) != 2 || c.frames[0].Spans[0] != (Span{0, int64(cut)})) {
			t.Fatalf("cut %d: first event spans %v", cut, c.frames[0].Spans)
		}
	}
}

// TestCBORDecodeKinds decodes objects of types the client scheme knows,
// and of types it does not (a custom resource, a meta.k8s.io Table): those
// are read as unstructured data.
func TestCBORDecodeKinds(t *testing.T) {
	cr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kwatch.test/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w1", "namespace": "ns", "resourceVersion": "9", "uid": "u-1"},
		"spec":     map[string]any{"size": int64(3)},
	}}
	table := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "meta.k8s.io/v1", "kind": "Table",
		"metadata": map[string]any{"resourceVersion": "11"},
		"rows": []any{map[string]any{"cells": []any{"a"}, "object": map[string]any{
			"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
			"metadata": map[string]any{"name": "cm1", "namespace": "ns", "resourceVersion": "11"}}}},
	}}
	status := &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure",
		Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version: 1 (5)"}
	secret := &corev1.Secret{TypeMeta: metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}, Data: map[string][]byte{"k": []byte("hush")}}
	for _, tc := range []struct {
		typ  string
		obj  runtime.Object
		want string
	}{
		{"ADDED", configMap("a", "5", map[string]string{"k": "v"}), "ADDED v1 ConfigMap ns/a rv 5 row= status=0"},
		{"MODIFIED", cr, "MODIFIED kwatch.test/v1 Widget ns/w1 rv 9 row= status=0"},
		{"ADDED", table, "ADDED meta.k8s.io/v1 Table ns/cm1 rv 11 row=PartialObjectMetadata status=0"},
		{"ERROR", status, "ERROR v1 Status / rv  row= status=410"},
		{"ADDED", secret, "ADDED v1 Secret ns/s rv  row= status=0"},
	} {
		ev, err := Decode(FormatCBOR, cborEvent(t, tc.typ, tc.obj), DecodeOptions{})
		if err != nil {
			t.Fatalf("%s: %v", tc.want, err)
		}
		code := int32(0)
		if ev.Status != nil {
			code = ev.Status.Code
		}
		got := fmt.Sprintf("%s %s %s %s/%s rv %s row=%s status=%d", ev.Type, ev.APIVersion, ev.Kind, ev.Namespace, ev.Name,
			ev.ResourceVersion, ev.RowKind, code)
		if got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
		if tc.obj == secret && (bytes.Contains(ev.Object, []byte("aHVzaA")) || !ev.Redacted) {
			t.Errorf("Secret data not redacted: %s", ev.Object)
		}
	}
}

// TestCBORScan checks the walk over data items of RFC 8949 §3, including
// indefinite-length items (Appendix A examples) and what is not CBOR.
func TestCBORScan(t *testing.T) {
	for _, tc := range []struct {
		hex  string
		want string // "n" for an item of n bytes, or the start of the error
	}{
		{"00", "1"},
		{"1bffffffffffffffff", "9"},
		{"3903e7", "3"},             // -1000
		{"f97c00", "3"},             // Infinity (float16)
		{"fb3ff199999999999a", "9"}, // 1.1
		{"c074323031332d30332d32315432303a30343a30305a", "22"}, // tag 0, date string
		{"d9d9f7a0", "4"},                    // self-described empty map
		{"5f42010243030405ff", "9"},          // indefinite byte string
		{"7f657374726561646d696e67ff", "13"}, // indefinite text string
		{"9f018202039f0405ffff", "10"},       // [_ 1, [2, 3], [_ 4, 5]]
		{"bf61610161629f0203ffff", "11"},     // {_ "a": 1, "b": [_ 2, 3]}
		{"a26161016162820203", "9"},          // {"a": 1, "b": [2, 3]}
		{"80", "1"},
		{"83010203", "4"},
		{"1c", "initial byte 0x1c uses reserved"},
		{"ff", "a break (0xff) outside"},
		{"8201ff", "a break (0xff) outside"},
		{"5f01ff", "initial byte 0x01 inside an indefinite-length string"},
		{"5f5f4101ffff", "initial byte 0x5f inside an indefinite-length string"},
		{"df", "initial byte 0xdf is not well-formed"},
		{"5b0000000000000100", "a string announces 256 bytes, more than 100"},
		{"5802aabb", "4"}, // a string with a one-byte length
		{"9b7fffffffffffffff", "a array announces"},
		{"bb4000000000000000", "a map announces"},
	} {
		data, err := hex.DecodeString(tc.hex)
		if err != nil {
			t.Fatal(err)
		}
		// Byte by byte and whole: the same answer.
		for _, step := range []int{1, len(data)} {
			var s cborScan
			got := "incomplete"
			for i := 0; i < len(data); i += step {
				p := data[i:min(i+step, len(data))]
				in := p
				if i+len(p) == len(data) {
					in = append(append([]byte{}, p...), 0xee) // a byte after the item stays unread
				}
				n, done, err := s.scan(in, 100, false)
				if err != nil {
					got = err.Error()
					break
				}
				if done {
					got = fmt.Sprint(i + n)
					break
				}
				if n != len(p) {
					t.Fatalf("%s: %d of %d bytes taken before the item ended", tc.hex, n, len(p))
				}
			}
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("%s (step %d): got %q, want %q", tc.hex, step, got, tc.want)
			}
		}
	}
	// Nesting is bounded.
	var s cborScan
	if _, _, err := s.scan(bytes.Repeat([]byte{0x81}, maxCBORDepth+1), 1<<20, false); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Fatalf("deep nesting: %v", err)
	}
}

// TestCBORLostAndRegained: lost bytes inside a string of an event keep the
// framing (that event is damaged); lost bytes elsewhere, a member that
// could not be inflated (Break), a malformed item and a body whose start
// was not captured make the Framer look for the next event start, which
// may straddle writes and follow a partial match.
func TestCBORLostAndRegained(t *testing.T) {
	big := strings.Repeat("x", 300)
	e1 := cborEvent(t, "ADDED", configMap("a", "1", map[string]string{"k": big}))
	e2 := cborEvent(t, "MODIFIED", configMap("a", "2", nil))
	e3 := cborEvent(t, "DELETED", configMap("a", "3", nil))
	at := bytes.Index(e1, []byte(big))
	summary := func(c *collected) string {
		var sb strings.Builder
		for _, f := range c.frames {
			if f.Data == nil {
				fmt.Fprintf(&sb, "[%d+%d damaged=%v] ", f.Offset, f.Length, f.Damaged)
				continue
			}
			ev, err := Decode(FormatCBOR, f.Data, DecodeOptions{})
			if err != nil {
				fmt.Fprintf(&sb, "[%d+%d: %v] ", f.Offset, f.Length, err)
				continue
			}
			fmt.Fprintf(&sb, "%s@%d ", ev.Type, f.Offset)
		}
		for _, p := range c.problems {
			fmt.Fprintf(&sb, "| %s @%d ", p.Kind, p.Offset)
		}
		return strings.TrimSpace(sb.String())
	}
	n1, n2 := int64(len(e1)), int64(len(e2))

	t.Run("gap inside a string", func(t *testing.T) {
		var c collected
		fr := c.framer(FormatCBOR, 0)
		fr.Write(e1[:at+10], 0)
		fr.Gap(100)
		fr.Write(e1[at+110:], 1)
		fr.Write(e2, 2)
		fr.Close()
		want := fmt.Sprintf("[0+%d damaged=true] MODIFIED@%d | %s @0", n1, n1, KindLost)
		if got := summary(&c); got != want {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
	t.Run("gap across events", func(t *testing.T) {
		var c collected
		fr := c.framer(FormatCBOR, 0)
		fr.Write(e1[:at+10], 0)
		fr.Gap(int64(len(e1) - at - 10 + 5)) // the rest of e1 and e2's first 5 bytes
		fr.Write(e2[5:], 1)
		fr.Write(e3[:4], 2) // the event start straddles writes
		fr.Write(e3[4:], 3)
		fr.Close()
		want := fmt.Sprintf("DELETED@%d | %s @0 | %s @%d | %s @%d", n1+n2, KindLost, KindLost, n1+5, KindCBORRegained, n1+n2)
		if got := summary(&c); got != want {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
	t.Run("break, then a partial match", func(t *testing.T) {
		var c collected
		fr := c.framer(FormatCBOR, 0)
		fr.Write(e1[:50], 0)
		fr.Break("member 1 could not be inflated")
		fr.Write([]byte{0xd9, 0xd9, 0xd9}, 1) // d9 d9 d9 d9 f7…: the match restarts twice
		fr.Write(e2[1:], 1)
		fr.Close()
		want := fmt.Sprintf("MODIFIED@52 | %s @0 | %s @50 | %s @52", KindLost, KindLost, KindCBORRegained)
		if got := summary(&c); got != want {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
	t.Run("malformed item", func(t *testing.T) {
		var c collected
		fr := c.framer(FormatCBOR, 0)
		fr.Write([]byte{0xa1, 0x01, 0xff}, 0) // a break as a definite map's value
		fr.Write(e2, 1)
		fr.Close()
		want := fmt.Sprintf("MODIFIED@3 | %s @0 | %s @3", KindMalformed, KindCBORRegained)
		if got := summary(&c); got != want {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
	t.Run("start not captured", func(t *testing.T) {
		var c collected
		fr := c.framer(FormatCBOR, 0)
		fr.Resync()
		fr.Write(e1[at:], 0)
		fr.Write(e2, 1)
		fr.Close()
		want := fmt.Sprintf("MODIFIED@%d | %s @%d", n1-int64(at), KindCBORRegained, n1-int64(at))
		if got := summary(&c); got != want {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
	t.Run("bookmark with object first", func(t *testing.T) {
		// The watch cache's bookmarks start with the key "object": the
		// real body's BOOKMARK at 339 is found after the loss.
		body, err := os.ReadFile("testdata/cbor-watch.bin")
		if err != nil {
			t.Fatal(err)
		}
		var c collected
		fr := c.framer(FormatCBOR, 0)
		fr.Resync()
		fr.Write(body[300:], 0)
		fr.Close()
		want := fmt.Sprintf("BOOKMARK@39 MODIFIED@171 | %s @39", KindCBORRegained)
		if got := summary(&c); got != want {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
	t.Run("every event oversize", func(t *testing.T) {
		body, err := os.ReadFile("testdata/cbor-watch.bin")
		if err != nil {
			t.Fatal(err)
		}
		for _, max := range []int64{3, 20, 100} {
			var c collected
			fr := c.framer(FormatCBOR, max)
			fr.Write(body[:339], 0)
			fr.Write(body[339:471], 1)
			fr.Write(body[471:], 2)
			fr.Close()
			var at []int64
			for _, p := range c.problems {
				if p.Kind == KindOversize {
					at = append(at, p.Offset)
				}
			}
			if fmt.Sprint(at) != "[0 339 471]" {
				t.Errorf("max %d: oversize reported at %v, want [0 339 471]:\n%s", max, at, c.String())
			}
		}
	})
	t.Run("junk between events", func(t *testing.T) {
		// A run of bytes that start no event is one problem, however
		// long, not one per byte.
		var c collected
		fr := c.framer(FormatCBOR, 0)
		fr.Write(e1, 0)
		fr.Write(make([]byte, 5000), 1)
		fr.Write(e2, 2)
		fr.Close()
		want := fmt.Sprintf("ADDED@0 MODIFIED@%d | %s @%d | %s @%d", n1+5000, KindJunk, n1, KindCBORRegained, n1+5000)
		if got := summary(&c); got != want {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
	t.Run("container never closed", func(t *testing.T) {
		// An object that is an indefinite-length map never closed: the
		// next events come as its items, and are found there.
		open := append([]byte{0xd9, 0xd9, 0xf7, 0xa2, 0x44, 't', 'y', 'p', 'e', 0x45, 'A', 'D', 'D', 'E', 'D', 0x46, 'o', 'b', 'j', 'e', 'c', 't', 0xbf}, 0x41, 'k')
		var c collected
		fr := c.framer(FormatCBOR, 0)
		fr.Write(open, 0)
		fr.Write(e2[:5], 1) // the start straddles writes
		fr.Write(e2[5:], 1)
		fr.Write(e3, 2)
		fr.Close()
		n0 := int64(len(open))
		want := fmt.Sprintf("[0+%d damaged=true] MODIFIED@%d DELETED@%d | %s @0", n0, n0, n0+n2, KindTruncated)
		if got := summary(&c); got != want {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
	t.Run("too many items", func(t *testing.T) {
		// An object of a million empty maps (a 1-byte item each) would
		// decode to gigabytes: skipped as larger than the limit.
		bomb := []byte{0xd9, 0xd9, 0xf7, 0xa2, 0x44, 't', 'y', 'p', 'e', 0x45, 'A', 'D', 'D', 'E', 'D', 0x46, 'o', 'b', 'j', 'e', 'c', 't',
			0x9a, 0, 0x20, 0, 0} // an array of 2 Mi items
		bomb = append(bomb, bytes.Repeat([]byte{0xa0}, 2<<20)...)
		var c collected
		fr := c.framer(FormatCBOR, 0)
		fr.Write(bomb, 0)
		fr.Write(e2, 1)
		fr.Close()
		want := fmt.Sprintf("MODIFIED@%d | %s @0 | %s @%d", len(bomb), KindOversize, KindCBORRegained, len(bomb))
		if got := summary(&c); got != want {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
	t.Run("oversize and cut short", func(t *testing.T) {
		var c collected
		fr := c.framer(FormatCBOR, 200)
		fr.Write(e1, 0)
		fr.Write(e2, 1)
		fr.Write(e3[:20], 2)
		fr.Close()
		want := fmt.Sprintf("MODIFIED@%d | %s @0 | %s @%d | %s @%d", n1, KindOversize, KindCBORRegained, n1, KindTruncated, n1+n2)
		if got := summary(&c); got != want {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
}

// FuzzCBORFramer frames arbitrary bytes as a CBOR watch body, cut into
// chunks chosen by seed, with an optional gap. Whether each chunk comes in
// one write or in many must not change anything; the frames must tile the
// bytes they came from; and a body that is a sequence of data items that
// fxamacker/cbor (under apimachinery's decoder) reads one by one must be
// framed exactly into them.
func FuzzCBORFramer(f *testing.F) {
	t := &testing.T{}
	e1 := cborEvent(t, "ADDED", configMap("a", "1", map[string]string{"k": "v"}))
	e2 := cborEvent(t, "BOOKMARK", configMap("", "2", nil))
	f.Add(append(append([]byte{}, e1...), e2...), int64(1), uint8(0), uint16(0), uint16(0))
	f.Add(append(append([]byte{}, e1...), e2...), int64(2), uint8(0), uint16(30), uint16(4))
	f.Add([]byte{0xbf, 0x61, 0x61, 0x9f, 0x01, 0x82, 0x02, 0x03, 0xff, 0xff, 0xbf, 0x61, 0x61, 0x01, 0xff}, int64(3), uint8(0), uint16(0), uint16(0))
	f.Add([]byte{0x5f, 0x42, 0x01, 0x02, 0xff, 0xd9, 0xd9, 0xd9, 0xf7, 0xa2, 0x44}, int64(4), uint8(9), uint16(0), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, seed int64, max uint8, gapAt, gapLen uint16) {
		limit := int64(0)
		if max > 0 {
			limit = int64(max)
		}
		rng := rand.New(rand.NewSource(seed))
		fc := cutChunks(data, rng, gapAt, gapLen)
		w := fc.run(t, FormatCBOR, limit, 0, nil, nil)
		s := fc.run(t, FormatCBOR, limit, 0, rng, nil)
		if d := diffLines(w.lines, s.lines); d != "" {
			t.Fatalf("chunks split into writes: framing differs from one write per chunk at %s", d)
		}
		checkFrames(t, data, fc, w, FormatCBOR)
		for _, fr := range w.frames {
			if fr.Data != nil {
				_, _ = Decode(FormatCBOR, fr.Data, DecodeOptions{})
			}
		}
	})
}

// cborItems splits data into the data items fxamacker/cbor reads from it
// one after another; ok is false when data is anything else (or beyond that
// decoder's limits), or when an item does not start as a watch event may
// (a self-described tag or a map), or holds an event start after its first
// byte (see holdCBOR).
func cborItems(data []byte) ([]string, bool) {
	var out []string
	for len(data) > 0 {
		if !cborMayStartEvent(data[0]) {
			return nil, false // junk to kwatch: not a self-described map
		}
		var raw fxcbor.RawMessage
		rest, err := fxcbor.UnmarshalFirst(data, &raw)
		if err != nil {
			return nil, false
		}
		item := data[:len(data)-len(rest)]
		for _, start := range cborEventStarts {
			if bytes.Contains(item[1:], start) {
				// A nested event start: kwatch takes it as a new
				// event after one that never ended (holdCBOR).
				return nil, false
			}
		}
		out = append(out, string(item))
		data = rest
	}
	return out, true
}

// TestDecodeStatusCBOR reads the Status body of an error answered in CBOR.
func TestDecodeStatusCBOR(t *testing.T) {
	s := cbor.NewSerializer(scheme.Scheme, scheme.Scheme)
	var b bytes.Buffer
	if err := s.Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure",
		Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version: 1 (5)"}, &b); err != nil {
		t.Fatal(err)
	}
	st := DecodeStatusCBOR(b.Bytes())
	if st == nil || st.Code != 410 || st.Reason != metav1.StatusReasonExpired {
		t.Fatalf("DecodeStatusCBOR = %+v", st)
	}
	if DecodeStatusCBOR([]byte("not cbor")) != nil {
		t.Fatal("junk decoded as a Status")
	}
}
