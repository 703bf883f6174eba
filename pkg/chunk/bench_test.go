package chunk

import (
	"bytes"
	"fmt"
	"testing"
)

// benchBody returns about wire bytes of chunks (no last-chunk, so that one
// Decoder can decode it again and again) whose sizes size gives, and the
// number of chunks.
func benchBody(wire int, size func(i int) int) ([]byte, int) {
	var b bytes.Buffer
	const event = `{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-0","resourceVersion":"938"}}}`
	n := 0
	for ; b.Len() < wire; n++ {
		sz := size(n)
		fmt.Fprintf(&b, "%x\r\n", sz)
		for k := sz; k > 0; {
			m := min(k, len(event))
			b.WriteString(event[:m])
			k -= m
		}
		b.WriteString("\r\n")
	}
	return b.Bytes(), n
}

// copyHandler copies chunk data out, as a consumer of the data (a framer
// of watch events) must, into a buffer that it reuses.
type copyHandler struct {
	nopHandler
	buf []byte
}

func (h *copyHandler) Data(_ *Chunk, p []byte) { copy(h.buf, p) }

// BenchmarkDecoder measures decoding throughput, in bytes of body on the
// wire, fed in 64 KiB writes as a reader of a socket would. With the "nop"
// handler the cost is the decoder's alone (data bytes are never touched, so
// large chunks cost almost nothing per byte); with "copy" the handler copies
// the data once, which is the least a real consumer does.
func BenchmarkDecoder(b *testing.B) {
	const write = 64 << 10
	for _, bc := range []struct {
		name string
		wire int
		size func(i int) int
	}{
		{"large-32KiB", 8 << 20, func(int) int { return 32 << 10 }},
		// Watch events of a Pod are around a kilobyte, varying a little.
		{"watch-1KiB", 4 << 20, func(i int) int { return 900 + i*37%250 }},
		{"tiny-1B", 1 << 20, func(int) int { return 1 }},
	} {
		body, chunks := benchBody(bc.wire, bc.size)
		for _, h := range []struct {
			name string
			h    Handler
		}{
			{"nop", nopHandler{}},
			{"copy", &copyHandler{buf: make([]byte, write)}},
		} {
			b.Run(bc.name+"/"+h.name, func(b *testing.B) {
				d := NewDecoder(h.h, Limits{})
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					for off := 0; off < len(body); off += write {
						p := body[off:min(off+write, len(body))]
						if n, err := d.Write(p); n != len(p) || err != nil {
							b.Fatalf("Write = %d, %v", n, err)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*chunks), "ns/chunk")
			})
		}
	}
}
