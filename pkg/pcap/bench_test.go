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
	files := []string{"big-lo.pcap", "burst-any.pcap", "watch-lo.pcap"}
	for i := range files {
		files[i] = filepath.Join(captureDir, files[i])
	}
	// KWATCH_BENCH_CAPTURE adds a capture of your own, e.g. one written by
	// go run ./bench/gen.
	if extra := os.Getenv("KWATCH_BENCH_CAPTURE"); extra != "" {
		files = append(files, extra)
	}
	for _, file := range files {
		name := filepath.Base(file)
		data, err := os.ReadFile(file)
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
