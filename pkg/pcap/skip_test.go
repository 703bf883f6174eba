package pcap_test

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/record"
)

// TestSkipPorts: connections with a port of SkipPorts on either side are
// left out unseen (no record, not counted: no summary's LeftOut, no
// Stats.LeftOut); others are decoded as without it, and Unmatched says
// nothing of a filter that only skips.
func TestSkipPorts(t *testing.T) {
	data, err := os.ReadFile(captureDir + "/watch-timeout-any.pcap") // one watch, through port 8001
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		skip          []uint16
		conns, events int
	}{{nil, 1, 4}, {[]uint16{9999}, 1, 4}, {[]uint16{8001}, 0, 0}, {[]uint16{44356}, 0, 0}} {
		var events int
		var sum *record.Summary
		opt := pcap.Options{SkipPorts: tc.skip}
		st, err := pcap.Read(context.Background(), bytes.NewReader(data), opt, record.SinkFunc(func(r record.Record) {
			switch v := r.(type) {
			case *record.Event:
				events++
			case *record.Summary:
				sum = v
			}
		}))
		if err != nil {
			t.Fatal(err)
		}
		if st.Connections != tc.conns || events != tc.events {
			t.Errorf("SkipPorts %v: %d connections, %d events; want %d, %d", tc.skip, st.Connections, events, tc.conns, tc.events)
		}
		if st.LeftOut != 0 || sum == nil || sum.LeftOut != nil {
			t.Errorf("SkipPorts %v: counted as left out by the filters: Stats.LeftOut %d, summary %+v", tc.skip, st.LeftOut, sum)
		}
		if msg := st.Unmatched(opt); msg != "" {
			t.Errorf("SkipPorts %v: Unmatched says %q", tc.skip, msg)
		}
	}
}
