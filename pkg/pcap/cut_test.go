package pcap_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/record"
)

// TestServerCuts: a watch the server ends badly (RST_STREAM with an error
// code, a TCP reset, a close without the last chunk) is a warning tied to
// the watch, and its End says how (record.Cut); the client's own cancel or
// close, and an end the capture lost, are not.
func TestServerCuts(t *testing.T) {
	for _, tc := range []struct {
		file string
		want string // "conn/exchange cut|-" of each watch End, then the cut warnings
	}{
		// net/http's server resets stream 3 with INTERNAL_ERROR.
		{"../../testdata/captures/h2c-reset-lo.pcap",
			"1/3 RST_STREAM INTERNAL_ERROR from the server · 1/1 - · warning 1/3: RST_STREAM INTERNAL_ERROR from the server, after 2 events in 302ms"},
		// The stack's node capture: kwatch stream cancels its stream
		// (RST_STREAM CANCEL from the client), curl closes its watch.
		{"../../testdata/captures/node-lo.pcap", "5/1 - · 3/1 -"},
		{"../../testdata/pcap/gen-rst-mid-chunk.pcap",
			"1/1 the server resetting the connection (TCP RST) · warning 1/1: the server resetting the connection (TCP RST), after 1 event in 3ms"},
		{"../../testdata/pcap/gen-fin-no-last-chunk.pcap",
			"1/1 the server closing the connection before the end of the body · warning 1/1: the server closing the connection before the end of the body, after 2 events in 1.003s"},
		// The client resets its watch.
		{"../../testdata/pcap/gen-client-rst-then-data.pcap", "1/1 -"},
		// The last chunk may have been in the bytes the capture lost.
		{"../../testdata/pcap/gen-lost-last-chunk.pcap", "1/1 -"},
		// The server ends the watch with its last chunk.
		{"../../testdata/pcap/watch-timeout-any.pcap", "1/1 -"},
	} {
		t.Run(filepath.Base(tc.file), func(t *testing.T) {
			data, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			var ends, warnings []string
			sink := record.SinkFunc(func(r record.Record) {
				switch v := r.(type) {
				case *record.End:
					if !v.Watch || v.Request {
						return
					}
					cut := "-"
					if v.Cut != nil {
						cut = v.Cut.String()
					}
					ends = append(ends, fmt.Sprintf("%d/%d %s", v.Conn.ID, v.Exchange, cut))
				case *record.Problem:
					if v.Kind == record.KindCut {
						if !v.Warning {
							t.Errorf("%s is not a warning", v.Kind)
						}
						warnings = append(warnings, fmt.Sprintf("warning %d/%d: %s", v.Conn.ID, v.Exchange, v.Detail))
					}
				}
			})
			opt := pcap.Options{Name: filepath.Base(tc.file), Keys: keysFor(t, filepath.Base(tc.file))}
			if _, err := pcap.Read(context.Background(), strings.NewReader(string(data)), opt, sink); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(append(ends, warnings...), " · "); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}
