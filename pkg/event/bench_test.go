package event

import (
	"fmt"
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

// BenchmarkDecodeTable measures decoding the Table watch event kubectl get
// -w gets for a ConfigMap (as in testdata/captures/table-watch-curl.pcap:
// three column definitions with their descriptions, one row whose object is
// a PartialObjectMetadata, about 1.9 KB), which is also checked for
// Secrets to redact, in MB/s of event bytes.
func BenchmarkDecodeTable(b *testing.B) {
	col := func(name, typ, format string, desc int) string {
		return fmt.Sprintf(`{"name":%q,"type":%q,"format":%q,"description":%q,"priority":0}`, name, typ, format, strings.Repeat("d", desc))
	}
	ev := []byte(`{"type":"ADDED","object":{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"379"},"columnDefinitions":[` +
		col("Name", "string", "name", 373) + "," + col("Data", "string", "", 296) + "," + col("Age", "string", "", 412) +
		`],"rows":[{"cells":["pre-1",1,"4m53s"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"pre-1",` +
		`"namespace":"default","uid":"8251f5df-478e-4d0f-a247-18f2aab0fe6c","resourceVersion":"379","creationTimestamp":"2026-12-01T04:56:55Z",` +
		`"managedFields":[{"manager":"kubectl-create","operation":"Update","apiVersion":"v1","time":"2026-12-01T04:56:55Z","fieldsType":"FieldsV1",` +
		`"fieldsV1":{"f:data":{".":{},"f:k":{}}}}]}}}]}}`)
	b.SetBytes(int64(len(ev)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if ev, err := Decode(FormatJSON, ev, DecodeOptions{}); err != nil || ev.Name != "pre-1" {
			b.Fatal(err)
		}
	}
}
