package rewatch_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/rewatch"
)

func decode(t *testing.T, name string, link bool) []record.Record {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "captures", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []record.Record
	var sink record.Sink = record.SinkFunc(func(r record.Record) { out = append(out, r) })
	if link {
		sink = rewatch.New(sink)
	}
	if _, err := pcap.Read(context.Background(), bytes.NewReader(data), pcap.Options{Name: name, Keys: keylog.New()}, sink); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestInformerReset: a client-go informer's watch-list, its connection
// reset, its resume told 410 Gone, its re-list (testdata/captures/
// informer-reset-lo.pcap, written by cmd's TestPcapInformerResetRelist):
// the resume follows the first watch after a reset, the re-list follows
// the resume after 410 Gone, and the re-list's objects compare with the
// versions the first watch delivered. Every record is passed on once, in
// its place.
func TestInformerReset(t *testing.T) {
	plain, linked := decode(t, "informer-reset-lo.pcap", false), decode(t, "informer-reset-lo.pcap", true)
	var restarts []*record.Restart
	var relists []*record.Relist
	var rest []record.Record
	for _, r := range linked {
		switch v := r.(type) {
		case *record.Restart:
			restarts = append(restarts, v)
		case *record.Relist:
			relists = append(relists, v)
		default:
			rest = append(rest, r)
		}
	}
	if len(rest) != len(plain) {
		t.Fatalf("%d records passed on, %d without the linker", len(rest), len(plain))
	}
	for i := range rest {
		if rest[i] != plain[i] && fmt.Sprintf("%T", rest[i]) != fmt.Sprintf("%T", plain[i]) {
			t.Fatalf("record %d is a %T, without the linker a %T", i, rest[i], plain[i])
		}
	}
	got := func(r *record.Restart) string {
		return fmt.Sprintf("#%d after #%d: %s, %s, %s from %s (last %s) %s later", r.Conn.ID, r.Prev.ID, r.Why, r.Relist, r.After,
			r.ResourceVersion, r.LastResourceVersion, r.Gap)
	}
	want := []string{
		"#2 after #1: resume, , reset from 544 (last 544) 716µs later",
		"#3 after #2: re-list, watch-list, gone from 544 (last 544) 836.659ms later",
	}
	if len(restarts) != len(want) {
		t.Fatalf("%d restarts, want %d", len(restarts), len(want))
	}
	for i, r := range restarts {
		if got(r) != want[i] {
			t.Errorf("restart %d: %s, want %s", i, got(r), want[i])
		}
	}
	if len(relists) != 1 {
		t.Fatalf("%d re-lists, want 1", len(relists))
	}
	rl := relists[0]
	ns := "e2e-testpcapinformerresetrelist-http-1-1-thr-pnjsb/"
	if rl.Conn.ID != 3 || rl.Sent != 10 || rl.Unchanged != 8 || rl.Partial ||
		fmt.Sprint(rl.Changed, rl.Appeared, rl.Disappeared) != fmt.Sprintf("[%[1]spt-2] [%[1]spt-new] [%[1]spt-3]", ns) {
		t.Errorf("re-list %+v", rl)
	}
	if want := time.Date(2026, 12, 4, 4, 32, 54, 328161000, time.UTC); !rl.Time.Equal(want) {
		t.Errorf("re-list said at %s, want the initial-events-end bookmark's time %s", rl.Time, want)
	}
}
