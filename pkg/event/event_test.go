package event

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand"
	"reflect"
	goruntime "runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

type collected struct {
	frames   []*Frame
	problems []FrameProblem
}

func (c *collected) framer(f Format, max int64) *Framer {
	return NewFramer(f, max, func(fr *Frame) { c.frames = append(c.frames, fr) },
		func(p FrameProblem) { c.problems = append(c.problems, p) })
}

func (c *collected) String() string {
	var sb strings.Builder
	for _, f := range c.frames {
		fmt.Fprintf(&sb, "frame %d off=%d len=%d spans=%v data=%q\n", f.Serial, f.Offset, f.Length, f.Spans, f.Data)
	}
	for _, p := range c.problems {
		fmt.Fprintf(&sb, "problem %s @%d (%s)\n", p.Kind, p.Offset, p.Detail)
	}
	return sb.String()
}

// spanBytes is how many bytes the chunks of f's spans carried.
func spanBytes(f *Frame) int64 {
	var n int64
	for _, s := range f.Spans {
		n += s.Bytes
	}
	return n
}

const ev1 = `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a}{\"b","namespace":"ns","resourceVersion":"5"},"data":{"k":"[{ü}]"}}}`

func TestJSONFramesAnySplit(t *testing.T) {
	body := ev1 + "\n" + ev1 + "\n"
	var whole collected
	fr := whole.framer(FormatJSON, 0)
	fr.Write([]byte(body), 0)
	if len(whole.frames) != 2 || string(whole.frames[0].Data) != ev1 || whole.frames[1].Offset != int64(len(ev1)+1) {
		t.Fatalf("whole:\n%s", whole.String())
	}
	for cut := 1; cut < len(body); cut++ {
		var c collected
		fr := c.framer(FormatJSON, 0)
		fr.Write([]byte(body[:cut]), 0)
		fr.Write([]byte(body[cut:]), 1)
		if len(c.frames) != 2 || string(c.frames[0].Data) != ev1 || string(c.frames[1].Data) != ev1 {
			t.Fatalf("cut %d:\n%s", cut, c.String())
		}
		if spanBytes(c.frames[0]) != int64(len(ev1)) {
			t.Fatalf("cut %d: spans %v do not add up to %d", cut, c.frames[0].Spans, len(ev1))
		}
		// Decoding must not depend on where the chunk boundary fell, even
		// inside the two bytes of "ü".
		ev, err := Decode(FormatJSON, c.frames[0].Data, DecodeOptions{})
		if err != nil || ev.Name != `a}{"b` || ev.ResourceVersion != "5" {
			t.Fatalf("cut %d: %v %+v", cut, err, ev)
		}
	}
}

func TestJSONSeveralEventsInOneChunkAndStraddling(t *testing.T) {
	var c collected
	fr := c.framer(FormatJSON, 0)
	fr.Write([]byte(ev1+"\n"+ev1[:10]), 0)
	if !fr.InFrame() || !fr.CurrentInChunk(0) || fr.FirstChunk() != 0 {
		t.Fatal("second event should be in progress in chunk 0")
	}
	fr.Write([]byte(ev1[10:]+"\n"), 1)
	if len(c.frames) != 2 {
		t.Fatalf("frames:\n%s", c.String())
	}
	want := []Span{{Carrier: 0, Bytes: 10}, {Carrier: 1, Bytes: int64(len(ev1) - 10)}}
	if fmt.Sprint(c.frames[1].Spans) != fmt.Sprint(want) {
		t.Errorf("spans %v, want %v", c.frames[1].Spans, want)
	}
}

func TestJSONJunkOversizeAndGap(t *testing.T) {
	var c collected
	fr := c.framer(FormatJSON, 40)
	fr.Write([]byte("xx "+ev1+"\n"), 0)
	fr.Write([]byte(`{"type":"ADDED"}`+"\n"), 0)
	if len(c.problems) != 2 || c.problems[0].Kind != KindJunk || c.problems[0].Offset != 0 ||
		c.problems[1].Kind != KindOversize || c.problems[1].Offset != 3 {
		t.Fatalf("problems:\n%s", c.String())
	}
	if len(c.frames) != 2 || !c.frames[0].Oversize || c.frames[0].Data != nil || string(c.frames[1].Data) != `{"type":"ADDED"}` {
		t.Fatalf("frames:\n%s", c.String())
	}

	var g collected
	fr = g.framer(FormatJSON, 0)
	fr.Write([]byte(ev1[:20]), 0)
	fr.Gap(30)
	fr.Write([]byte(ev1[50:]+"\n"+ev1+"\n"), 1)
	if len(g.frames) != 1 || string(g.frames[0].Data) != ev1 || len(g.problems) != 1 || g.problems[0].Kind != KindLost {
		t.Fatalf("after a gap the framer must drop the damaged event and resync on the next line:\n%s", g.String())
	}
}

func TestJSONResyncAtChunkStart(t *testing.T) {
	// The lost bytes held the end of the damaged event and its '\n'; the
	// next chunk starts with an intact event, which must not be skipped.
	var c collected
	fr := c.framer(FormatJSON, 0)
	fr.Write([]byte(ev1[:20]), 0)
	fr.Gap(int64(len(ev1) - 20 + 1))
	fr.CarrierStart()
	fr.Write([]byte(ev1+"\n"), 1)
	if len(c.frames) != 1 || string(c.frames[0].Data) != ev1 || len(c.problems) != 1 || c.problems[0].Kind != KindLost {
		t.Fatalf("an event starting a chunk after a gap must be framed:\n%s", c.String())
	}
	// Inside a chunk, after a gap, a '{' is not trusted: the line is
	// skipped.
	var d collected
	fr = d.framer(FormatJSON, 0)
	fr.Write([]byte(ev1[:20]), 0)
	fr.Gap(5)
	fr.CarrierStart()
	fr.Write([]byte("x"), 1)
	fr.Write([]byte(ev1[26:]+"\n"+ev1+"\n"), 1)
	if len(d.frames) != 1 || string(d.frames[0].Data) != ev1 {
		t.Fatalf("a chunk that does not start with '{' keeps skipping to the next line:\n%s", d.String())
	}
}

func TestProtobufFrames(t *testing.T) {
	payload := []byte("0123456789")
	var frame []byte
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(payload)))
	frame = append(frame, payload...)
	body := append(append([]byte{}, frame...), frame...)
	for cut := 1; cut < len(body); cut++ {
		var c collected
		fr := c.framer(FormatProtobuf, 0)
		fr.Write(body[:cut], 0)
		fr.Write(body[cut:], 1)
		if len(c.frames) != 2 || string(c.frames[1].Data) != string(payload) || c.frames[1].Offset != 14 || c.frames[1].Length != 14 {
			t.Fatalf("cut %d:\n%s", cut, c.String())
		}
	}
	var c collected
	fr := c.framer(FormatProtobuf, 0)
	fr.Write(body[:6], 0)
	fr.Close()
	if len(c.problems) != 1 || c.problems[0].Kind != KindTruncated {
		t.Fatalf("truncated frame:\n%s", c.String())
	}
}

func TestDecodeBookmarkErrorAndSecret(t *testing.T) {
	bm := `{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"103","annotations":{"k8s.io/initial-events-end":"true"}}}}`
	ev, err := Decode(FormatJSON, []byte(bm), DecodeOptions{})
	if err != nil || ev.Type != "BOOKMARK" || ev.ResourceVersion != "103" || !ev.InitialEventsEnd {
		t.Errorf("bookmark: %v %+v", err, ev)
	}
	er := `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}`
	ev, err = Decode(FormatJSON, []byte(er), DecodeOptions{})
	if err != nil || ev.Status == nil || ev.Status.Code != 410 || ev.Status.Reason != metav1.StatusReasonExpired {
		t.Errorf("error event: %v %+v", err, ev)
	}
	sec := `{"type":"ADDED","object":{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s","namespace":"ns","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"stringData\":{\"password\":\"hunter2\"}}"}},"data":{"password":"aHVudGVyMg=="}}}`
	ev, err = Decode(FormatJSON, []byte(sec), DecodeOptions{})
	if err != nil || strings.Contains(string(ev.Object), "aHVudGVyMg") || strings.Contains(string(ev.Object), "hunter2") || !strings.Contains(string(ev.Object), Redacted) || !ev.Redacted {
		t.Errorf("secret not redacted: %v %s", err, ev.Object)
	}
	for _, hostile := range []string{
		`{"type":"ADDED","object":{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s"},"data":{"password":"aHVudGVyMg=="},"x":1e400}}`,
		`{"type":"ADDED","object":{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s"},"data":"aHVudGVyMg=="}}`,
		`{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"s"},"kind":"Secret","data":{"password":"aHVudGVyMg=="}}}`,
	} {
		ev, err := Decode(FormatJSON, []byte(hostile), DecodeOptions{})
		if err == nil && strings.Contains(string(ev.Object), "aHVudGVyMg") {
			t.Errorf("secret shown: %s", ev.Object)
		}
	}
	ev, _ = Decode(FormatJSON, []byte(sec), DecodeOptions{ShowSecrets: true})
	if !strings.Contains(string(ev.Object), "aHVudGVyMg") {
		t.Errorf("--show-secrets lost the data: %s", ev.Object)
	}
	if _, err := Decode(FormatJSON, []byte(`{"kind":"ConfigMap"}`), DecodeOptions{}); err == nil {
		t.Error("an object that is not a watch event decoded")
	}
}

func TestDecodeProtobuf(t *testing.T) {
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system", ResourceVersion: "137"}}
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	enc := scheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion)
	raw, err := runtime.Encode(enc, cm)
	if err != nil {
		t.Fatal(err)
	}
	we := &metav1.WatchEvent{Type: "ADDED", Object: runtime.RawExtension{Raw: raw}}
	data, err := we.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	ev, err := Decode(FormatProtobuf, data, DecodeOptions{})
	if err != nil || ev.Kind != "ConfigMap" || ev.Name != "coredns" || ev.ResourceVersion != "137" {
		t.Fatalf("%v %+v", err, ev)
	}
	if !strings.Contains(string(ev.Object), `"name":"coredns"`) || !strings.Contains(string(ev.Object), `"kind":"ConfigMap"`) {
		t.Errorf("object as JSON: %s", ev.Object)
	}
}

func TestFormatForContentType(t *testing.T) {
	for ct, want := range map[string]Format{
		"application/json":                                 FormatJSON,
		"application/json;stream=watch":                    FormatJSON,
		"Application/JSON; charset=utf-8":                  FormatJSON,
		"application/vnd.kubernetes.protobuf;stream=watch": FormatProtobuf,
		"text/plain": 0,
	} {
		if got, _ := FormatForContentType(ct); got != want {
			t.Errorf("%q: %v, want %v", ct, got, want)
		}
	}
}

func TestRedactObject(t *testing.T) {
	sec := []byte(`{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s"},"data":{"p":"aHVudGVyMg=="}}`)
	if got := string(RedactObject(sec)); strings.Contains(got, "aHVudGVyMg") || !strings.Contains(got, Redacted) {
		t.Errorf("RedactObject = %s", got)
	}
	cm := []byte(`{"kind":"ConfigMap","data":{"p":"v"}}`)
	if got := string(RedactObject(cm)); got != string(cm) {
		t.Errorf("a ConfigMap changed: %s", got)
	}
}

// TestJSONUnclosedEventResync: an event cut short without a gap being seen
// (its closing braces never came) is followed by a line that starts a new
// event: the framer reports the cut and decodes the events after it, at
// every split of the body into two chunks, instead of holding everything
// until the event bound. A pretty-printed event, with newlines inside it,
// still frames whole.
func TestJSONUnclosedEventResync(t *testing.T) {
	cut := ev1[:60]
	body := cut + "\n" + ev1 + "\n" + ev1 + "\n"
	want := func(c *collected) bool {
		return len(c.frames) == 3 && c.frames[0].Damaged && c.frames[0].Data == nil && c.frames[0].Length == int64(len(cut)+1) &&
			string(c.frames[1].Data) == ev1 && string(c.frames[2].Data) == ev1 &&
			c.frames[1].Offset == int64(len(cut)+1) && len(c.problems) == 1 && c.problems[0].Kind == KindTruncated &&
			c.problems[0].Offset == 0 &&
			c.problems[0].Detail == "61 bytes of an event that never closed, then a new event at offset 61; decoding goes on from it"
	}
	for split := 0; split <= len(body); split++ {
		var c collected
		fr := c.framer(FormatJSON, 0)
		fr.Write([]byte(body[:split]), 0)
		fr.Write([]byte(body[split:]), 1)
		fr.Close()
		if !want(&c) {
			t.Fatalf("split at %d:\n%s", split, c.String())
		}
		if spanBytes(c.frames[1]) != int64(len(ev1)) {
			t.Fatalf("split at %d: spans %v do not add up to %d", split, c.frames[1].Spans, len(ev1))
		}
	}
	// Cut right after a backslash inside a string: a raw newline is no
	// escape, so the next event is not swallowed.
	var bs collected
	fr0 := bs.framer(FormatJSON, 0)
	fr0.Write([]byte(`{"type":"ADDED","object":{"data":{"k":"ab\`+"\n"+ev1+"\n"), 0)
	fr0.Close()
	if len(bs.frames) != 2 || !bs.frames[0].Damaged || string(bs.frames[1].Data) != ev1 {
		t.Fatalf("cut after a backslash:\n%s", bs.String())
	}
	pretty := "{\n  \"type\": \"ERROR\",\n  \"object\": {\n    \"kind\": \"Status\"\n  }\n}\n"
	var c collected
	fr := c.framer(FormatJSON, 0)
	for i := range len(pretty) {
		fr.Write([]byte{pretty[i]}, 0)
	}
	fr.Close()
	if len(c.frames) != 1 || string(c.frames[0].Data) != strings.TrimSuffix(pretty, "\n") || len(c.problems) != 0 {
		t.Fatalf("pretty-printed event:\n%s", c.String())
	}
}

// TestProtobufRegainAtChunkStart: after bytes lost across a frame boundary
// the protobuf framing is lost, and regained at the first chunk that starts
// with a watch event (a length prefix within the bound, then the
// WatchEvent's type field); chunks that do not are passed over. The result
// does not depend on how each chunk is split into writes.
func TestProtobufRegainAtChunkStart(t *testing.T) {
	a, b, c := protoFrame("ADDED", "a", "5"), protoFrame("MODIFIED", "b", "6"), protoFrame("BOOKMARK", "", "7")
	chunks := []string{a[:20], "\x00\x00\x00", "junk that is no event", b, c}
	for split := 0; split <= 30; split++ {
		var col collected
		fr := col.framer(FormatProtobuf, 0)
		fr.CarrierStart()
		fr.Write([]byte(chunks[0]), 0)
		fr.Gap(int64(len(a) - 20 + 7)) // the rest of a and the start of a chunk
		for i, ch := range chunks[1:] {
			fr.CarrierStart()
			k := min(split, len(ch))
			fr.Write([]byte(ch[:k]), i+1)
			fr.Write([]byte(ch[k:]), i+1)
		}
		fr.Close()
		var kinds []string
		for _, p := range col.problems {
			kinds = append(kinds, p.Kind)
		}
		if len(col.frames) != 2 || string(col.frames[0].Data) != b[4:] || string(col.frames[1].Data) != c[4:] ||
			fmt.Sprint(kinds) != fmt.Sprint([]string{KindLost, KindLost, KindRegained}) {
			t.Fatalf("split %d: problems %q\n%s", split, kinds, col.String())
		}
		if want := int64(len(a) + 7 + 3 + len("junk that is no event")); col.frames[0].Offset != want {
			t.Fatalf("split %d: the regained event at offset %d, want %d", split, col.frames[0].Offset, want)
		}
	}
}

// TestProtobufWrongRegain: object bytes that look like an event's start at
// a chunk's start make the framer regain wrongly; a length prefix past the
// bound right after, or the first frame failing to decode (Suspect), sends
// it back to searching, and the events in later chunks decode.
func TestProtobufWrongRegain(t *testing.T) {
	a, b, c := protoFrame("ADDED", "a", "5"), protoFrame("MODIFIED", "b", "6"), protoFrame("DELETED", "c", "7")
	fake := "\x00\x00\x00\x09" + "\x0a\x05ADDEDzz" // a 9-byte "event" that decodes to nothing
	for _, tc := range []struct {
		name    string
		chunk   string // the chunk that fakes an event start
		suspect bool
	}{
		{"prefix past the bound", fake + "\xff\xff\xff\xffmore", false},
		{"does not decode", fake, true},
	} {
		var col collected
		fr := col.framer(FormatProtobuf, 0)
		fr.CarrierStart()
		fr.Write([]byte(a[:20]), 0)
		fr.Gap(int64(len(a) - 20 + 3))
		for i, ch := range []string{tc.chunk, b, c} {
			fr.CarrierStart()
			fr.Write([]byte(ch), i+1)
			if i == 0 && tc.suspect {
				fr.Suspect(col.frames[len(col.frames)-1].Serial, 0)
			}
		}
		fr.Close()
		n := len(col.frames)
		if n < 2 || string(col.frames[n-2].Data) != b[4:] || string(col.frames[n-1].Data) != c[4:] {
			t.Errorf("%s: the events after the wrong regain:\n%s", tc.name, col.String())
		}
		if !strings.Contains(col.String(), "protobuf framing regained wrongly") {
			t.Errorf("%s: no report of the wrong regain:\n%s", tc.name, col.String())
		}
	}
}

// TestFramerLargeEvents frames events around and past the sizes where a
// Framer moves an event from its kept buffer into pooled blocks
// (maxKeptBuffer, then eventBlock at a time), in JSON and protobuf, in
// chunks and writes of random sizes, with an event bound that makes some of
// them oversize after blocks were taken: every frame must hold exactly its
// input bytes, and the framing must not depend on the writes.
func TestFramerLargeEvents(t *testing.T) {
	sizes := []int{maxKeptBuffer - 1, maxKeptBuffer, maxKeptBuffer + 1, maxKeptBuffer + eventBlock,
		maxKeptBuffer + eventBlock + 1, 200_000, 3*eventBlock + 17, 1 << 20}
	for _, proto := range []bool{false, true} {
		var data []byte
		for i, n := range sizes {
			if proto {
				payload := bytes.Repeat([]byte{byte('a' + i)}, n)
				data = binary.BigEndian.AppendUint32(data, uint32(n))
				data = append(data, payload...)
				continue
			}
			ev := fmt.Sprintf(`{"type":"ADDED","object":{"kind":"ConfigMap","data":{"k":"%s"}}}`, strings.Repeat("x", n))
			data = append(data, ev...)
			data = append(data, '\n')
		}
		format := FormatJSON
		if proto {
			format = FormatProtobuf
		}
		for seed := range int64(4) {
			rng := rand.New(rand.NewSource(seed))
			fc := cutChunks(data, rng, 0, 0)
			for _, max := range []int64{0, 300_000} {
				w := fc.run(t, format, max, 0, nil, nil)
				s := fc.run(t, format, max, 0, rng, &DecodeOptions{})
				if d := diffLines(w.lines, s.lines); d != "" {
					t.Fatalf("proto=%v seed %d max %d: framing differs with other writes at %s", proto, seed, max, d)
				}
				checkFrames(t, data, fc, w, format)
				if len(w.frames) != len(sizes) {
					t.Fatalf("proto=%v seed %d max %d: %d frames, want %d", proto, seed, max, len(w.frames), len(sizes))
				}
				for i, fr := range w.frames {
					if oversize := max > 0 && fr.Length > max; fr.Oversize != oversize || (!oversize && int64(len(fr.Data)) != fr.Length-map[bool]int64{true: 4}[proto]) {
						t.Errorf("proto=%v seed %d max %d: frame %d of %d bytes: oversize %v, %d bytes of data", proto, seed, max, i, fr.Length, fr.Oversize, len(fr.Data))
					}
				}
			}
		}
	}
}

// TestFramerDecodeWith: with DecodeWith, an event whole in one write up to
// its newline is decoded as it is framed, exactly as Decode decodes it;
// one cut by the end of a write, one written over several lines and one
// not read in one pass are framed the same and left to the receiver.
func TestFramerDecodeWith(t *testing.T) {
	pretty := "{\"type\":\"DELETED\",\n \"object\":{\"kind\":\"Pod\"}}\n"
	escaped := `{"type":"ADD\u0045D","object":{"kind":"Pod"}}` + "\n"
	for _, tc := range []struct {
		name    string
		writes  []string
		decoded []bool
	}{
		{"whole", []string{evA + "\n" + evB + "\r\n"}, []bool{true, true}},
		{"cut", []string{evA[:10], evA[10:] + "\n" + evB}, []bool{false, false}},
		{"no newline yet", []string{evA, "\n"}, []bool{false}},
		{"several lines", []string{pretty + evB + "\n"}, []bool{false, true}},
		{"escaped type", []string{escaped + evA + "\n"}, []bool{false, true}},
	} {
		var frames []*Frame
		fr := NewFramer(FormatJSON, 0, func(f *Frame) { frames = append(frames, f) }, func(p FrameProblem) {
			t.Errorf("%s: problem %+v", tc.name, p)
		})
		fr.DecodeWith(DecodeOptions{})
		for _, w := range tc.writes {
			fr.Write([]byte(w), -1)
		}
		fr.Close()
		if len(frames) != len(tc.decoded) {
			t.Fatalf("%s: %d frames, want %d", tc.name, len(frames), len(tc.decoded))
		}
		for i, f := range frames {
			if got := f.Decoded != nil; got != tc.decoded[i] {
				t.Errorf("%s: frame %d decoded as framed: %v, want %v", tc.name, i, got, tc.decoded[i])
			}
			want, err := Decode(FormatJSON, f.Data, DecodeOptions{})
			if err != nil {
				t.Fatalf("%s: frame %d %q: %v", tc.name, i, f.Data, err)
			}
			if f.Decoded != nil && !reflect.DeepEqual(f.Decoded, want) {
				t.Errorf("%s: frame %d decoded as framed %+v, Decode %+v", tc.name, i, f.Decoded, want)
			}
		}
	}
}

// TestFramerDecodeWithLongLine: a line of many events (not one event per
// line) is framed event by event as without DecodeWith, and reading each
// one's start does not search or copy the rest of the line again (found by
// a hostile-input trial: 65536 events on one line took 77 s).
func TestFramerDecodeWithLongLine(t *testing.T) {
	const n = 10000
	ev := `{"type":"ADDED","object":{}}`
	line := []byte(strings.Repeat(ev, n) + "\n" + evA + "\n")
	var frames []*Frame
	fr := NewFramer(FormatJSON, 0, func(f *Frame) { frames = append(frames, f) }, func(p FrameProblem) {
		t.Errorf("problem %+v", p)
	})
	fr.DecodeWith(DecodeOptions{})
	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	fr.Write(line, -1)
	goruntime.ReadMemStats(&after)
	fr.Close()
	if len(frames) != n+1 {
		t.Fatalf("%d frames, want %d", len(frames), n+1)
	}
	for i, f := range frames[:n] {
		// The line's last event is the one its newline ends.
		if string(f.Data) != ev || f.Offset != int64(i*len(ev)) || (f.Decoded != nil) != (i == n-1) {
			t.Fatalf("frame %d: %q at %d, decoded as framed %v", i, f.Data, f.Offset, f.Decoded != nil)
		}
	}
	if last := frames[n]; string(last.Data) != evA || last.Decoded == nil {
		t.Errorf("last frame %q, decoded as framed %v; want evA, true", last.Data, last.Decoded != nil)
	}
	// Each frame owns its bytes and its Frame; a copy of the rest of the
	// line per event would be n*len(line)/2 bytes, 1.4 GB here.
	if got := after.TotalAlloc - before.TotalAlloc; got > 64*uint64(len(line)) {
		t.Errorf("framing a %d-byte line allocated %d bytes", len(line), got)
	}
}

// TestIndexEventManyMetadata: an object of many "metadata" keys lists at
// most maxIndexedMetas of their members in all, whatever its size (found
// by a hostile-input trial: 100 000 small metadata allocated 95 times the
// event's size), and reads the same metadata as readMeta's walk.
func TestIndexEventManyMetadata(t *testing.T) {
	meta := `"metadata":{` + strings.TrimSuffix(strings.Repeat(`"":0,`, 64), ",") + `}`
	for _, n := range []int{1, 2, 3, 100, 5000} {
		data := []byte(`{"type":"ADDED","object":{` + strings.TrimSuffix(strings.Repeat(meta+",", n), ",") + `,"metadata":{"name":"last"}}}`)
		x, ok := indexEvent(data, nil, nil)
		if !ok {
			t.Fatalf("%d metadata: not read", n)
		}
		listed := 0
		for _, m := range x.members {
			listed += m.subEnd - m.sub
		}
		if listed > maxIndexedMetas {
			t.Errorf("%d metadata: %d of their members listed, more than %d", n, listed, maxIndexedMetas)
		}
		checkIndexEvent(t, data)
		if ev, err := Decode(FormatJSON, data, DecodeOptions{}); err != nil || ev.Name != "last" {
			t.Errorf("%d metadata: %+v, %v; want the name of the last", n, ev, err)
		}
	}
}

// TestFramerDecodeWithTrailingSpace: a line of events whose newline comes
// after much whitespace is framed as without DecodeWith, its last event
// decoded as framed (the whitespace is stepped over once per line, not
// once per event: BenchmarkFramerLongLine).
func TestFramerDecodeWithTrailingSpace(t *testing.T) {
	const n = 2000
	ev := `{"type":"ADDED","object":{}}`
	body := []byte(strings.Repeat(ev, n) + strings.Repeat(" \t\r", 20000) + "\n" + evA + " \r\n")
	frame := func(decode bool) (lines []string) {
		fr := NewFramer(FormatJSON, 0, func(f *Frame) {
			lines = append(lines, fmt.Sprintf("%d+%d %q decoded=%v", f.Offset, f.Length, f.Data, f.Decoded != nil))
		}, func(p FrameProblem) { t.Errorf("problem %+v", p) })
		if decode {
			fr.DecodeWith(DecodeOptions{})
		}
		fr.Write(body, -1)
		fr.Close()
		return lines
	}
	plain, decoded := frame(false), frame(true)
	if len(decoded) != n+1 || len(plain) != n+1 {
		t.Fatalf("%d and %d frames, want %d", len(plain), len(decoded), n+1)
	}
	for i := range decoded {
		want := strings.Replace(plain[i], "decoded=false", fmt.Sprintf("decoded=%v", i >= n-1), 1)
		if decoded[i] != want {
			t.Fatalf("frame %d: %s, want %s", i, decoded[i], want)
		}
	}
}
