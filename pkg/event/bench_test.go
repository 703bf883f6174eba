package event

import (
	"strings"
	"testing"
)

// BenchmarkDecode measures decoding one JSON watch event (its type, its
// object's identity, and the check that it is JSON), in MB/s of event
// bytes: a value of plain text, and one of a file's lines (a ConfigMap
// holding a script or a YAML file: an escaped newline every 64 bytes).
func BenchmarkDecode(b *testing.B) {
	for _, c := range []struct {
		name  string
		value string
	}{
		{"1KiB", strings.Repeat("x", 1<<10)},
		{"200KiB", strings.Repeat("x", 200<<10)},
		{"200KiB-lines", strings.Repeat(strings.Repeat("x", 62)+`\n`, 200<<10/64)},
	} {
		ev := []byte(`{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"big","namespace":"kube-system","uid":"u","resourceVersion":"103"},"data":{"k":"` +
			c.value + `"}}}`)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(ev)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := Decode(FormatJSON, ev, DecodeOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFramerLongLine frames one write of a line of 16 000 small events
// ending in 256 KiB of spaces, with DecodeWith, in MB/s of the write: the
// line's newline is found, and its whitespace stepped over, once for all
// its events.
func BenchmarkFramerLongLine(b *testing.B) {
	line := []byte(strings.Repeat(`{"type":"ADDED","object":{}}`, 16000) + strings.Repeat(" ", 256<<10) + "\n")
	b.SetBytes(int64(len(line)))
	for i := 0; i < b.N; i++ {
		fr := NewFramer(FormatJSON, 0, func(*Frame) {}, func(FrameProblem) {})
		fr.DecodeWith(DecodeOptions{})
		fr.Write(line, -1)
		fr.Close()
	}
}
