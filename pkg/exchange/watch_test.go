package exchange

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/record"
)

func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestStartOfBody: a DATA frame's data that start an event, plain or as
// the start of a gzip member, name the format and coding; the middle of
// a member, a member of something else, and a Status body do not.
func TestStartOfBody(t *testing.T) {
	const ev = `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"}}}` + "\n"
	member := gzipped(t, ev+ev)
	// A member larger than a frame: its first 4096 bytes (a DATA frame
	// of kube-apiserver's) start it.
	var big strings.Builder
	rnd := rand.New(rand.NewPCG(1, 2))
	for big.Len() < 256<<10 {
		fmt.Fprintf(&big, `{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","data":{"k":"%x"}}}`+"\n", rnd.Uint64())
	}
	large := gzipped(t, big.String())
	if len(large) < 8192 {
		t.Fatalf("the large member is %d bytes", len(large))
	}
	for _, tc := range []struct {
		name   string
		data   []byte
		f      event.Format
		coding string
		ok     bool
	}{
		{"json", []byte(ev), event.FormatJSON, "", true},
		{"gzip member of json", member, event.FormatJSON, "gzip", true},
		{"the first frame of a large gzip member", large[:4096], event.FormatJSON, "gzip", true},
		{"a later frame of a large gzip member", large[4096:8192], 0, "", false},
		{"inside a gzip member", member[12:], 0, "", false},
		{"gzip member of a status", gzipped(t, `{"kind":"Status","apiVersion":"v1"}`), 0, "", false},
		{"gzip header only", member[:10], 0, "", false},
		{"status", []byte(`{"kind":"Status","apiVersion":"v1","code":410}`), 0, "", false},
		{"empty", nil, 0, "", false},
	} {
		f, coding, ok := StartOfBody(tc.data)
		if f != tc.f || coding != tc.coding || ok != tc.ok {
			t.Errorf("%s: StartOfBody = %v, %q, %v; want %v, %q, %v", tc.name, f, coding, ok, tc.f, tc.coding, tc.ok)
		}
	}
}

// TestWatchOf: a response whose request was seen is a watch as the request
// says; one whose request was not seen is a tentative watch only with a
// watch's media type (kube-apiserver's: protobuf with stream=watch, a CBOR
// sequence, JSON not as a list) and a body that streams.
func TestWatchOf(t *testing.T) {
	watchReq, getReq := &record.Request{Watch: true}, &record.Request{}
	for _, c := range []struct {
		req                       *record.Request
		ct                        string
		streams, watch, tentative bool
	}{
		{watchReq, "application/vnd.kubernetes.protobuf", true, true, false},
		{getReq, "application/vnd.kubernetes.protobuf;stream=watch", true, false, false},
		{nil, "application/vnd.kubernetes.protobuf;stream=watch", true, true, true},
		{nil, "application/vnd.kubernetes.protobuf", true, false, false},
		{nil, "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", true, false, false},
		{nil, "application/cbor-seq", true, true, true},
		{nil, "application/cbor", true, false, false},
		{nil, "application/json", true, true, true},
		{nil, "application/json", false, false, false},
		{nil, "application/json;as=Table;g=meta.k8s.io;v=v1", true, true, true},
		{nil, "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", true, false, false},
		{nil, "text/plain", true, false, false},
		{nil, "application/json;;", true, false, false},
	} {
		_, watch, tentative := WatchOf(c.req, c.ct, c.streams)
		if watch != c.watch || tentative != c.tentative {
			t.Errorf("WatchOf(%+v, %q, %v) = watch %v, tentative %v; want %v, %v", c.req, c.ct, c.streams, watch, tentative, c.watch, c.tentative)
		}
	}
}
