package report

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kwatch/kwatch/pkg/health"
	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/rewatch"
)

// TestCaptureLinks: in the capture of a client-go informer whose connection
// was reset (testdata/captures/informer-reset-lo.pcap: its resume told 410
// Gone, then a watch-list with the last resourceVersion seen), the report
// joins the resume to the watch before it and the re-list to the resume, by
// what pkg/rewatch said (a re-list, not the resume its resourceVersion
// alone would suggest), and draws what the re-list sent again on its lane.
func TestCaptureLinks(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "captures", "informer-reset-lo.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	rep := New(nil, Options{})
	if _, err := pcap.Read(context.Background(), bytes.NewReader(data), pcap.Options{Name: "informer-reset-lo.pcap", Keys: keylog.New()},
		rewatch.New(health.New(rep))); err != nil {
		t.Fatal(err)
	}
	p := pageOf(t, rep)
	if len(p.Lanes) != 3 {
		t.Fatalf("%d lanes, want the informer's 3 watches", len(p.Lanes))
	}
	for i, want := range []string{"", "0|resume|follows #1: resume from resourceVersion 544 (the last one seen), after a reset, 716µs later",
		"1|re-list|follows #2: re-list, a watch-list from resourceVersion 544 (the last one seen), after 410 Gone, 836.66ms later"} {
		if got := p.Lanes[i].Link; got != want {
			t.Errorf("lane %d: link %q, want %q", i, got, want)
		}
	}
	if got := p.Lanes[2].Reason; got != "re-list (watch-list) after 410 Gone" {
		t.Errorf("the re-list's lane says it opened as %q", got)
	}
	var relist string
	for _, n := range p.Notes {
		if n.Kind == "relist" && n.Lane == 2 {
			relist = n.Text
		}
	}
	if !strings.HasPrefix(relist, "RE-LIST 10 objects sent: 8 unchanged") {
		t.Errorf("the re-list's note on its lane: %q", relist)
	}
	if !strings.Contains(p.Lanes[2].Health, "8 of 9 objects sent again unchanged") {
		t.Errorf("the re-list's health: %q", p.Lanes[2].Health)
	}
}
