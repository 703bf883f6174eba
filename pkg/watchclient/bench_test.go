package watchclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/kwatch/kwatch/pkg/record"
)

// BenchmarkStream measures kwatch stream's decoding of a live watch: a local
// server replays a recorded ConfigMap event (about 1 KB, one chunk each) as
// fast as it can; the loop reads it through the tapped connection and the
// shared decoder. It reports events/s and heap bytes allocated per event.
func BenchmarkStream(b *testing.B) {
	objs := recordedObjects(b)
	line, _ := json.Marshal(map[string]any{"type": "MODIFIED", "object": objs[1]})
	line = append(line, '\n')
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		f := w.(http.Flusher)
		for {
			if _, err := w.Write(line); err != nil {
				return
			}
			f.Flush()
		}
	}))
	defer srv.Close()

	var n atomic.Int64
	target := int64(b.N)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := record.SinkFunc(func(r record.Record) {
		if _, ok := r.(*record.Event); ok && n.Add(1) == target {
			cancel()
		}
	})
	c, err := Connect(ConnectOptions{ProxyURL: srv.URL}, sink)
	if err != nil {
		b.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	if _, err := Run(ctx, c, WatchOptions{Raw: "/api/v1/namespaces/kube-system/configmaps?watch=true&resourceVersion=1"}); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	if got := n.Load(); got < target {
		b.Fatalf("%d events, want %d", got, target)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N), "B/event")
	b.SetBytes(int64(len(line)))
}
