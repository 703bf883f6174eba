package httpconn_test

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

var update = flag.Bool("update", false, "rewrite the fuzz seed corpus in testdata/fuzz/")

// Bodies shaped like kube-apiserver's.
const (
	watchGET = "GET /api/v1/namespaces/default/configmaps?watch=true&resourceVersion=100 HTTP/1.1\r\n" +
		"Host: 127.0.0.1:8001\r\nAccept: application/json\r\n\r\n"
	protoGET = "GET /api/v1/namespaces/default/configmaps?watch=true HTTP/1.1\r\n" +
		"Host: 127.0.0.1:8001\r\nAccept: application/vnd.kubernetes.protobuf;stream=watch\r\n\r\n"
	listGET   = "GET /api/v1/namespaces/default/configmaps?limit=500 HTTP/1.1\r\nHost: 127.0.0.1:8001\r\n\r\n"
	chunkedOK = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
	protoOK   = "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.kubernetes.protobuf;stream=watch\r\nTransfer-Encoding: chunked\r\n\r\n"
	lastChunk = "0\r\n\r\n"
	evAdded   = `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"default","resourceVersion":"101"},"data":{"k":"v"}}}` + "\n"
	evMod     = `{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"default","resourceVersion":"102"},"data":{"k":"w"}}}` + "\n"
	evSecret  = `{"type":"ADDED","object":{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s","namespace":"default","resourceVersion":"103"},"data":{"password":"aHVudGVyMg=="}}}` + "\n"
	evError   = `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}` + "\n"
	status410 = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}`
)

func chunkOf(data string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(data), data) }

// protoEvent is a protobuf watch event as kube-apiserver frames it: a
// 4-byte big-endian length and a metav1.WatchEvent.
func protoEvent(typ, name, rv string) string {
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", ResourceVersion: rv},
		Data:       map[string]string{"k": "v"}}
	var raw bytes.Buffer
	if err := scheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion).Encode(cm, &raw); err != nil {
		panic(err)
	}
	payload, err := (&metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: raw.Bytes()}}).Marshal()
	if err != nil {
		panic(err)
	}
	return string(binary.BigEndian.AppendUint32(nil, uint32(len(payload)))) + string(payload)
}

// connSeeds is FuzzConn's seed corpus, written to testdata/fuzz/FuzzConn by
// TestConnSeeds -update: one conversation per behaviour of the parser.
var connSeeds = []struct {
	name           string
	client, server string
	seed           int64
	mode           uint8
}{
	{"watch-json", watchGET, chunkedOK + chunkOf(evAdded) + chunkOf(evMod) + lastChunk, 1, 0},
	{"watch-json-small-limits", watchGET, chunkedOK + chunkOf(evAdded) + chunkOf(evMod) + lastChunk, 2, 1},
	{"watch-event-two-chunks", watchGET, chunkedOK + chunkOf(evAdded[:50]) + chunkOf(evAdded[50:]+evMod) + lastChunk, 3, 0},
	{"watch-events-one-chunk", watchGET, chunkedOK + chunkOf(evAdded+evMod+evError) + lastChunk, 4, 4},
	{"watch-secret", watchGET, chunkedOK + chunkOf(evSecret) + lastChunk, 5, 2},
	{"watch-protobuf", protoGET, protoOK + chunkOf(protoEvent("ADDED", "a", "101")) + chunkOf(protoEvent("DELETED", "a", "102")) + lastChunk, 6, 0},
	{"watch-fin-no-last-chunk", watchGET, chunkedOK + chunkOf(evAdded) + chunkOf(evMod)[:40], 7, 0},
	{"watch-reset", watchGET, chunkedOK + chunkOf(evAdded), 8, 4},
	{"watch-capture-ended", watchGET, chunkedOK + chunkOf(evAdded), 9, 8},
	{"no-request", "", chunkedOK + chunkOf(evAdded) + lastChunk, 10, 0},
	{"keepalive-list-then-watch", listGET + watchGET,
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}" + chunkedOK + chunkOf(evAdded) + lastChunk, 11, 0},
	{"gone-410", watchGET + watchGET,
		"HTTP/1.1 410 Gone\r\nContent-Type: application/json\r\nContent-Length: " + fmt.Sprint(len(status410)) + "\r\n\r\n" + status410 +
			chunkedOK + chunkOf(evError) + lastChunk, 12, 0},
	{"content-length-watch", watchGET, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + fmt.Sprint(len(evError)) + "\r\n\r\n" + evError, 13, 0},
	{"close-delimited-watch", watchGET, "HTTP/1.1 200 OK\r\nContent-Type: application/json;stream=watch\r\n\r\n" + evAdded + evMod, 14, 0},
	{"continue-then-watch", watchGET, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + chunkedOK + chunkOf(evAdded) + lastChunk, 15, 0},
	{"head-and-204", "HEAD / HTTP/1.1\r\n\r\nDELETE /x HTTP/1.1\r\n\r\n" + watchGET,
		"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n" + chunkedOK + chunkOf(evAdded) + lastChunk, 16, 0},
	{"request-bodies", "POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloPUT /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 17, 0},
	{"chunk-ext-trailers", watchGET, chunkedOK + "0" + chunkOf(evAdded)[0:2] + " ;a=\"b\\\"c\"" + chunkOf(evAdded)[2:] + "000;x=y\r\nX-T: 1\r\nX-U: 2\r\n\r\n", 18, 0},
	{"bare-lf", watchGET, "HTTP/1.1 200 OK\nContent-Type: application/json\nTransfer-Encoding: chunked\n\n" +
		strings.ReplaceAll(chunkOf(evAdded), "\r\n", "\n") + "0\n\n", 19, 0},
	{"junk-between-events", watchGET, chunkedOK + chunkOf("xx "+evAdded+"  ]] "+evMod) + lastChunk, 20, 0},
	{"upgrade-101", "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x05hello", 21, 0},
	{"tls", "\x16\x03\x01\x00\x05hello", "\x16\x03\x03\x00\x02hi", 22, 0},
	{"http2-preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "", 23, 0},
	{"not-http", "SSH-2.0-OpenSSH_9.6\r\n", "SSH-2.0-OpenSSH_9.6\r\n", 24, 0},
	{"content-encoded-watch", watchGET, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkOf("\x1f\x8b\x08\x00") + lastChunk, 25, 0},
	{"te-and-content-length", watchGET, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkOf(evAdded) + lastChunk, 26, 0},
	{"bad-content-length", listGET + listGET, "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\nabc", 27, 0},
	{"overflow-chunk-size", watchGET, chunkedOK + "10000000000000000\r\n" + evAdded, 28, 0},
	{"header-too-large", watchGET, "HTTP/1.1 200 OK\r\n" + strings.Repeat("X-Pad: 0123456789\r\n", 8) + "\r\n", 29, 1},
	{"event-too-large", watchGET, chunkedOK + chunkOf(evAdded) + chunkOf(evMod) + lastChunk, 30, 1},
	{"malformed-lines", "GET\r\n\r\n", "HTTP/1.1 abc\r\n\r\n", 31, 0},
	{"malformed-header-field", watchGET, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nno colon here\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkOf(evAdded) + lastChunk, 32, 0},
}

// fuzzFile formats one seed in the "go test fuzz v1" corpus format.
func fuzzFile(values ...any) []byte {
	var b bytes.Buffer
	b.WriteString("go test fuzz v1\n")
	for _, v := range values {
		switch v := v.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q)\n", v)
		default:
			fmt.Fprintf(&b, "%T(%v)\n", v, v)
		}
	}
	return b.Bytes()
}

// checkSeeds writes (with -update) or checks the seed files of a fuzz
// target; other files there (crashers kept as regression tests) are left
// alone.
func checkSeeds(t *testing.T, target string, files map[string][]byte) {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", target)
	for name, want := range files {
		path := filepath.Join(dir, name)
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not the seed the table makes (%v); run go test ./pkg/httpconn -run TestConnSeeds -update", path, err)
		}
	}
}

// TestConnSeeds keeps testdata/fuzz/FuzzConn in step with connSeeds.
func TestConnSeeds(t *testing.T) {
	files := map[string][]byte{}
	for _, s := range connSeeds {
		files[s.name] = fuzzFile([]byte(s.client), []byte(s.server), s.seed, s.mode)
	}
	checkSeeds(t, "FuzzConn", files)
}
