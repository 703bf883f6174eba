package h2conn

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/kwatch/kwatch/internal/testutil"
	"github.com/kwatch/kwatch/pkg/carrier"
	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/record"
)

func configMap(name, ns, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, ResourceVersion: rv}}
}

// protoEvent frames a protobuf watch event as kube-apiserver does.
func protoEvent(t testing.TB, typ string, obj runtime.Object) []byte {
	t.Helper()
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	raw, err := runtime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion), obj)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := (&metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: raw}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(payload))), payload...)
}

// cborEvent encodes a watch event as kube-apiserver does for
// application/cbor-seq.
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

func gzipMember(t testing.TB, p []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = zw.Write(p)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// runJoined feeds pieces to a Conn joined mid-connection and returns its
// records.
func runJoined(t testing.TB, pieces []piece, step int) []record.Record {
	var out []record.Record
	c := New(&record.Conn{ID: 1, HTTP2: true}, record.SinkFunc(func(r record.Record) { out = append(out, r) }), Options{Joined: true})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	testutil.Feed(pieces, step, t0, c.ClientData, c.ServerData)
	c.CloseServer(exchange.EndFIN, t0)
	c.CloseClient(exchange.EndFIN, t0)
	return out
}

// summary is the records as lines a test can read: events by stream,
// notes and problems by kind, requests and responses with their unknown
// fields.
func summary(recs []record.Record) string {
	var b strings.Builder
	for _, r := range recs {
		switch v := r.(type) {
		case *record.Event:
			fmt.Fprintf(&b, "s%d event %s %s %s/%s rv %s (%s, %d frames)\n", v.Exchange, v.Type, v.Kind, v.Namespace, v.Name, v.ResourceVersion, v.Format, len(v.Frames))
		case *record.Request:
			u, _ := json.Marshal(v.Unknown)
			fmt.Fprintf(&b, "s%d request %q %q watch=%v unknown=%s\n", v.Exchange, v.Method, v.Target, v.Watch, u)
		case *record.Response:
			u, _ := json.Marshal(v.Unknown)
			fmt.Fprintf(&b, "s%d response %d %s %s %q watch=%v inferred=%v unknown=%s\n", v.Exchange, v.StatusCode, v.ContentType, v.Format, v.ContentEncoding, v.Watch, v.Inferred, u)
		case *record.ConnNote:
			if v.Resource != nil {
				fmt.Fprintf(&b, "note s%d resource %s %s %s\n", v.Stream, v.Resource.APIVersion, v.Resource.Kind, v.Resource.Namespace)
			} else {
				fmt.Fprintf(&b, "note %s: %s\n", v.Kind, v.Message)
			}
		case *record.Problem:
			if v.Kind == record.KindCut {
				// The server's RST_STREAM INTERNAL_ERROR: a warning of
				// its own (cut_test.go), not what this test looks at.
				break
			}
			fmt.Fprintf(&b, "problem %s %s @%d: %s\n", v.Direction, v.Kind, v.Offset, v.Detail)
		case *record.End:
			fmt.Fprintf(&b, "s%d end %s %v\n", v.Exchange, v.How, v.Events)
		}
	}
	return b.String()
}

// TestJoined: a connection joined after its watches opened, whose
// encoders' dynamic tables hold entries from before. Its streams are
// followed from their DATA frames, in every format (JSON from the middle
// of an event, protobuf, CBOR, gzip members), named from their events;
// a new stream's HEADERS decode as far as HPACK allows; a CONTINUATION
// of a block begun before, and a stream of no watch, are said. The same
// whatever the split.
func TestJoined(t *testing.T) {
	c, s := newPeer(true), newPeer(false)
	// Before the join: the watches open; their HEADERS fill both
	// dynamic tables (the path, the token, the content types).
	for _, id := range []uint32{1, 3, 5, 7, 9} {
		watchRequest(t, c, id)
	}
	watchResponse(t, s, 1)
	s.headers(t, 3, false, 0, ":status", "200", "content-type", "application/vnd.kubernetes.protobuf;stream=watch")
	s.headers(t, 5, false, 0, ":status", "200", "content-type", "application/cbor-seq")
	s.headers(t, 7, false, 0, ":status", "200", "content-type", "application/json", "content-encoding", "gzip")
	s.headers(t, 9, false, 0, ":status", "200", "content-type", "application/octet-stream")
	big := ev("MODIFIED", "big", "150")
	big = append(big[:len(big)-2], []byte(`,"data":{"k":"`+strings.Repeat("x", 300)+`"}}`+"\n")...)
	_ = s.fr.WriteData(1, false, big[:100])
	// A header block left open: its CONTINUATION comes after the join.
	_ = s.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 11, BlockFragment: []byte{0x88}})
	c.buf.Reset()
	s.buf.Reset()

	var pieces []piece
	flush := func() {
		if c.buf.Len() > 0 {
			pieces = append(pieces, piece{Client: true, P: bytes.Clone(c.buf.Bytes())})
			c.buf.Reset()
		}
		if s.buf.Len() > 0 {
			pieces = append(pieces, piece{P: bytes.Clone(s.buf.Bytes())})
			s.buf.Reset()
		}
	}
	// After it.
	_ = s.fr.WriteContinuation(11, true, []byte{0x5f, 0x87})
	_ = s.fr.WriteData(1, false, big[100:]) // the rest of an event
	_ = s.fr.WriteData(1, false, ev("ADDED", "a", "151"))
	_ = s.fr.WriteData(3, false, protoEvent(t, "ADDED", configMap("p", "prod", "152")))
	_ = s.fr.WriteData(5, false, cborEvent(t, "ADDED", configMap("c", "cbor", "153")))
	_ = s.fr.WriteData(7, false, gzipMember(t, append(ev("ADDED", "g", "154"), ev("MODIFIED", "g", "155")...)))
	_ = s.fr.WriteData(9, false, []byte("\x00\x01 not a watch"))
	_ = c.fr.WriteWindowUpdate(0, 1<<20)
	_ = c.fr.WritePing(false, [8]byte{9, 8, 7, 6, 5, 4, 3, 2})
	flush()
	_ = s.fr.WritePing(true, [8]byte{9, 8, 7, 6, 5, 4, 3, 2})
	// A new stream: its :authority, authorization and accept are
	// entries from before the join; its path is new.
	c.headers(t, 13, true, 0, ":method", "GET", ":scheme", "http", ":authority", "127.0.0.1:8001",
		":path", "/api/v1/namespaces/default/pods?watch=1", "authorization", "Bearer secret-token", "accept", "application/json")
	flush()
	watchResponse(t, s, 13) // content-type: from before the join
	_ = s.fr.WriteData(13, false, ev("ADDED", "pod", "156"))
	_ = s.fr.WriteData(7, false, gzipMember(t, ev("DELETED", "g", "157")))
	_ = s.fr.WriteData(1, true, ev("DELETED", "a", "158"))
	_ = s.fr.WriteData(9, true, []byte("more"))
	_ = s.fr.WriteRSTStream(3, http2.ErrCodeCancel)
	// DATA on a stream reset since the join starts nothing.
	_ = s.fr.WriteData(3, false, protoEvent(t, "ADDED", configMap("late", "prod", "159")))
	// Trailers of a stream whose response began before the join.
	s.headers(t, 5, true, 0, "grpc-status", "0")
	flush()

	got := summary(runJoined(t, pieces, 0))
	for _, step := range []int{1, 7} {
		if g := summary(runJoined(t, pieces, step)); g != got {
			t.Fatalf("fed in writes of %d bytes:\n%s\nwhole:\n%s", step, g, got)
		}
	}
	for _, want := range []string{
		"note h2-joined: CONTINUATION from the server on stream 11: the rest of a header block that began before the join; passed over (and any more before its first HEADERS)\n",
		"s1 response 200 application/json json \"\" watch=true inferred=true unknown=null\n",
		"note h2-joined: stream 1: 1 DATA frame (356 data bytes) before the first that starts a watch event passed over",
		"note s1 resource v1 ConfigMap default\ns1 event ADDED ConfigMap default/a rv 151 (json, 1 frames)\n",
		"s3 response 200 application/vnd.kubernetes.protobuf;stream=watch protobuf \"\" watch=true inferred=true",
		"note s3 resource v1 ConfigMap prod\ns3 event ADDED ConfigMap prod/p rv 152 (protobuf, 1 frames)\n",
		"s5 response 200 application/cbor-seq cbor \"\" watch=true inferred=true",
		"s5 event ADDED ConfigMap cbor/c rv 153 (cbor, 1 frames)\n",
		"s7 response 200 application/json json \"gzip\" watch=true inferred=true",
		"s7 event ADDED ConfigMap default/g rv 154 (json, 1 frames)\ns7 event MODIFIED ConfigMap default/g rv 155 (json, 1 frames)\n",
		"s7 event DELETED ConfigMap default/g rv 157",
		"note h2-joined: stream 9: 2 DATA frames (18 data bytes) of a response whose HEADERS were not captured, none starting a watch event; not decoded (end of stream)\n",
		`s13 request "GET" "/api/v1/namespaces/default/pods?watch=1" watch=true unknown=[{"position":2,"index":`,
		"s13 response 200 application/json json \"\" watch=true inferred=true unknown=[{\"position\":1,",
		"s13 event ADDED ConfigMap default/pod rv 156 (json, 1 frames)\n",
		"s1 event DELETED ConfigMap default/a rv 158",
		"s3 end reset by RST_STREAM map[ADDED:1]\n",
		"s5 end end of stream map[ADDED:1]\n",
		"HTTP/2 connection: 6 streams since the join",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("records lack %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"late", "secret-token", "MODIFIED ConfigMap default/big", "problem"} {
		if strings.Contains(got, not) {
			t.Errorf("records hold %q:\n%s", not, got)
		}
	}
	// s13's own request named it: no note names its resource.
	if strings.Contains(got, "note s13 resource") {
		t.Errorf("stream 13 named from its events though its path was seen:\n%s", got)
	}
}

// TestJoinedGapAndEnd: a joined direction that ends before its frames are
// found says so; lost bytes before any byte came are passed over.
func TestJoinedGapAndEnd(t *testing.T) {
	var out []record.Record
	c := New(&record.Conn{ID: 1, HTTP2: true}, record.SinkFunc(func(r record.Record) { out = append(out, r) }), Options{Joined: true})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.ClientGap(100, t0) // nothing held yet: the client starts after it
	p := newPeer(false)
	_ = p.fr.WritePing(false, [8]byte{1})
	_ = p.fr.WritePing(false, [8]byte{2})
	_ = p.fr.WritePing(false, [8]byte{3})
	c.ClientData(p.buf.Bytes(), t0)
	c.ServerData([]byte("\xff\xfe junk, not frames"), t0)
	c.CloseServer(exchange.EndFIN, t0)
	c.CloseClient(exchange.EndFIN, t0)
	got := summary(out)
	if !strings.Contains(got, "problem server "+KindJoinNoFrames+" @0: the server's first 19 bytes hold no HTTP/2 frame boundary") ||
		strings.Count(got, "problem") != 1 {
		t.Errorf("records:\n%s", got)
	}
}

// TestJoinedBounds: CONTINUATIONs before the first HEADERS are said once;
// a header block held past the budget is not decoded, and what it may
// add to the dynamic table is then unknown; nothing stays reserved.
func TestJoinedBounds(t *testing.T) {
	c := newPeer(false)
	c.buf.Reset()
	for range 1000 {
		_ = c.fr.WriteContinuation(1, false, []byte{0x82})
	}
	_ = c.fr.WriteContinuation(1, true, []byte{0x82})
	// A block of 40 000 bytes in 16 KiB frames, with a field indexed:
	// the next block refers to it.
	c.hb.Reset()
	_ = c.enc.WriteField(hpack.HeaderField{Name: ":method", Value: "GET"})
	_ = c.enc.WriteField(hpack.HeaderField{Name: "x-big", Value: strings.Repeat("v", 40000)})
	_ = c.enc.WriteField(hpack.HeaderField{Name: "x-small", Value: "s"})
	block := bytes.Clone(c.hb.Bytes())
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block[:16000]})
	_ = c.fr.WriteContinuation(3, false, block[16000:32000])
	_ = c.fr.WriteContinuation(3, true, block[32000:])
	c.headers(t, 5, true, 0, ":method", "GET", ":path", "/api/v1/pods?watch=1", "x-small", "s")
	budget := event.NewBudget(8000)
	var out []record.Record
	conn := New(&record.Conn{ID: 1, HTTP2: true}, record.SinkFunc(func(r record.Record) { out = append(out, r) }),
		Options{Joined: true, Events: carrier.Options{Budget: budget}})
	conn.JoinAt(false, 0)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	conn.ClientData(c.buf.Bytes(), t0)
	conn.CloseClient(exchange.EndFIN, t0)
	conn.CloseServer(exchange.EndFIN, t0)
	got := summary(out)
	if strings.Count(got, "CONTINUATION from the client") != 1 ||
		!strings.Contains(got, "problem client "+event.KindBudget) ||
		!strings.Contains(got, `s5 request "GET" "/api/v1/pods?watch=1" watch=true unknown=[{"position":2,"index":63,"valueBytes":-1}]`) {
		t.Errorf("records:\n%s", got)
	}
	if h := budget.Held(); h != 0 {
		t.Errorf("%d bytes still reserved", h)
	}
}

// TestJoinedRecords: a quiet watch joined mid-connection whose bytes come
// in TLS records: its one event, the first and only record of the server
// since the join, is decoded when that record has come, before any more
// bytes or the end; the client's WINDOW_UPDATE after it too.
func TestJoinedRecords(t *testing.T) {
	s, c := newPeer(false), newPeer(true)
	s.buf.Reset()
	c.buf.Reset()
	_ = s.fr.WriteData(1, false, ev("ADDED", "one", "200"))
	_ = c.fr.WriteWindowUpdate(0, 500)
	var out []record.Record
	conn := New(&record.Conn{ID: 1, HTTP2: true}, record.SinkFunc(func(r record.Record) { out = append(out, r) }), Options{Joined: true})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	conn.ServerRecord(s.buf.Bytes(), t0)
	got := summary(out)
	if !strings.Contains(got, "s1 event ADDED ConfigMap default/one rv 200 (json, 1 frames)\n") || strings.Contains(got, "problem") {
		t.Fatalf("after the server's one record:\n%s", got)
	}
	// Bytes without records: held, as before.
	var out2 []record.Record
	conn2 := New(&record.Conn{ID: 2, HTTP2: true}, record.SinkFunc(func(r record.Record) { out2 = append(out2, r) }), Options{Joined: true})
	conn2.ServerData(s.buf.Bytes(), t0)
	if got := summary(out2); strings.Contains(got, "s1 event") {
		t.Errorf("an event from bytes not known to be a record, before more came:\n%s", got)
	}
	conn.ClientRecord(c.buf.Bytes(), t0)
	conn.CloseServer(exchange.EndCapture, t0)
	conn.CloseClient(exchange.EndCapture, t0)
	if got := summary(out); strings.Contains(got, "problem") || strings.Count(got, "s1 event") != 1 {
		t.Errorf("records:\n%s", got)
	}
}

// TestJoinedPingUntimed: a PING held while its direction's first frame
// was found is handed on at the time of that decision, so its round trip
// is not known: the connection's summary says 1 PING answered, without a
// round trip of 0s.
func TestJoinedPingUntimed(t *testing.T) {
	c, s := newPeer(true), newPeer(false)
	c.buf.Reset()
	s.buf.Reset()
	var out []record.Record
	conn := New(&record.Conn{ID: 1, HTTP2: true}, record.SinkFunc(func(r record.Record) { out = append(out, r) }), Options{Joined: true})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	_ = c.fr.WritePing(false, [8]byte{7})
	conn.ClientData(bytes.Clone(c.buf.Bytes()), t0)
	c.buf.Reset()
	_ = c.fr.WriteWindowUpdate(0, 100)
	_ = c.fr.WriteWindowUpdate(1, 100)
	conn.ClientData(bytes.Clone(c.buf.Bytes()), t0.Add(time.Second))
	_ = s.fr.WritePing(true, [8]byte{7})
	conn.ServerRecord(s.buf.Bytes(), t0.Add(2*time.Second))
	conn.CloseClient(exchange.EndFIN, t0.Add(3*time.Second))
	conn.CloseServer(exchange.EndFIN, t0.Add(3*time.Second))
	got := summary(out)
	if !strings.Contains(got, "1 PING answered (round trip not known: held while the join was recognised)") || strings.Contains(got, "round trip 0s") {
		t.Errorf("records:\n%s", got)
	}
}
