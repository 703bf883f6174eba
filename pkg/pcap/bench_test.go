package pcap_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/printer"
	"github.com/kwatch/kwatch/pkg/record"
)

// BenchmarkPipeline measures the whole kwatch pcap path (capture reading,
// reassembly, HTTP, chunks, events) in MB/s of capture file, with the JSON
// printer writing to io.Discard and with no printer at all.
func BenchmarkPipeline(b *testing.B) {
	for _, name := range []string{"big-lo.pcap", "burst-any.pcap", "watch-lo.pcap"} {
		data, err := os.ReadFile(filepath.Join(captureDir, name))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name+"/json", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				p := printer.NewJSON(io.Discard, printer.Options{})
				if _, err := pcap.Read(context.Background(), bytes.NewReader(data), pcap.Options{}, p); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/decode-only", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := pcap.Read(context.Background(), bytes.NewReader(data), pcap.Options{}, record.SinkFunc(func(record.Record) {})); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
