package pcap_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/wire"
)

// pipelineTimeout bounds one fuzz input: far more than any input of the
// fuzzer's size needs, so that only a loop that does not end trips it.
const pipelineTimeout = 30 * time.Second

// FuzzPipeline runs arbitrary file bytes through the whole kwatch pcap path
// (capture formats, link and IP layers, reassembly, HTTP, chunks, events)
// with a sink that discards the records, once with the default options and
// once with tiny bounds (2 connections, 4 buffered pages, 7-byte feeds, a
// 300-byte budget), so that the fuzzer reaches them. It must not panic, must
// end, and must release every byte reserved from the budgets.
//
// The seed corpus is testdata/fuzz/FuzzPipeline: every capture in
// testdata/pcap and testdata/captures (see TestPipelineSeeds).
func FuzzPipeline(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		done := make(chan error, 1)
		go func() {
			discard := record.SinkFunc(func(record.Record) {})
			// An error for a file that is not a capture is fine; bytes
			// left reserved from a budget are not.
			budget := event.NewBudget(0)
			_, _ = pcap.Read(context.Background(), bytes.NewReader(data), pcap.Options{Name: "fuzz",
				HTTP: wire.Options{Limits: exchange.Limits{Budget: budget}}}, discard)
			small := event.NewBudget(300)
			_, _ = pcap.Read(context.Background(), bytes.NewReader(data), pcap.Options{Name: "fuzz",
				MaxConnections: 2, MaxBufferedPerConn: 4, MaxBufferedTotal: 6, MaxFeed: 7,
				HTTP: wire.Options{Limits: exchange.Limits{Budget: small}}}, discard)
			var err error
			if h, hs := budget.Held(), small.Held(); h != 0 || hs != 0 {
				err = fmt.Errorf("%d and %d bytes still reserved from the budgets after the capture ended", h, hs)
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(pipelineTimeout):
			t.Fatalf("pcap.Read did not end within %v on %d bytes", pipelineTimeout, len(data))
		}
	})
}

// maxSeedBytes bounds a seed: bigger captures are cut to their first
// 64 KiB, which still holds their handshakes, requests and first events.
const maxSeedBytes = 64 << 10

// TestPipelineSeeds keeps testdata/fuzz/FuzzPipeline in step with the
// captures: -update writes a seed for each, otherwise each seed must be
// there and hold the capture's (first 64 KiB of) bytes. Other files there
// (crashers kept as regression tests) are left alone.
func TestPipelineSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzPipeline")
	for _, file := range captures(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > maxSeedBytes {
			data = data[:maxSeedBytes]
		}
		want := fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", data)
		seed := filepath.Join(dir, filepath.Base(filepath.Dir(file))+"-"+filepath.Base(file))
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(seed, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got, err := os.ReadFile(seed); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not the seed of %s (%v); run go test ./pkg/pcap -run TestPipelineSeeds -update", seed, file, err)
		}
	}
}
