package event

import (
	"os"
	"testing"
)

// TestStartFormat: each format's events are recognised by their first
// bytes (a real CBOR body from kube-apiserver among them), and bytes from
// inside an event, a Status body, text or a short start are not.
func TestStartFormat(t *testing.T) {
	cborBody, err := os.ReadFile("testdata/cbor-watch.bin")
	if err != nil {
		t.Fatal(err)
	}
	proto := protoFrame("MODIFIED", "cm", "7")
	bookmark := cborEvent(t, "BOOKMARK", configMap("", "8", nil))
	for _, tc := range []struct {
		name string
		p    string
		want Format
		ok   bool
	}{
		{"json", evA + "\n", FormatJSON, true},
		{"json bookmark", evB, FormatJSON, true},
		{"protobuf", proto, FormatProtobuf, true},
		{"cbor (kube-apiserver)", string(cborBody), FormatCBOR, true},
		{"cbor bookmark", string(bookmark), FormatCBOR, true},
		{"json inside an event", evA[20:], 0, false},
		{"json status", `{"kind":"Status","apiVersion":"v1","status":"Failure"}`, 0, false},
		{"json start cut short", `{"typ`, 0, false},
		{"protobuf without its object", proto[:14], 0, false},
		{"protobuf inside an event", proto[9:], 0, false},
		{"protobuf with another magic", proto[:18] + "k9s\x00" + proto[22:], 0, false},
		{"cbor inside an event", string(cborBody[1:]), 0, false},
		{"text", "hello, world\r\n", 0, false},
		{"empty", "", 0, false},
	} {
		f, ok := StartFormat([]byte(tc.p))
		if f != tc.want || ok != tc.ok {
			t.Errorf("%s: StartFormat = %v, %v; want %v, %v", tc.name, f, ok, tc.want, tc.ok)
		}
	}
}
