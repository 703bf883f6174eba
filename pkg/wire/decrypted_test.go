package wire

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kwatch/kwatch/internal/testutil"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/record"
)

// TestDecryptedJoined: TLS's decrypted bytes that are HTTP/2 frames
// without the preface, ALPN not seen (a TLS connection decrypted from the
// middle on), are sniffed by the decrypted board as a connection joined
// mid-connection, as in the clear. The decrypted bytes here are a
// recorded h2c connection's from its second stream on.
func TestDecryptedJoined(t *testing.T) {
	pieces := testutil.ConnPieces(t, filepath.Join("../../testdata/captures", "h2c-reset-lo.pcap"))
	cut := testutil.CutPieces(pieces, 195, 1014) // from the client's SETTINGS ACK and stream 3's request
	var events []string
	var kinds []string
	sink := record.SinkFunc(func(r record.Record) {
		switch v := r.(type) {
		case *record.Event:
			events = append(events, v.Type+" "+v.Name)
		case *record.ConnNote:
			kinds = append(kinds, v.Kind)
		case *record.Problem:
			if v.Kind != record.KindCut { // the harness's server FIN: a warning of its own
				t.Errorf("problem %s: %s", v.Kind, v.Detail)
			}
		}
	})
	c := NewBoard(Options{MidStream: true, Keys: keylog.New()}).Conn(&record.Conn{ID: 1}, sink)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	noted := 0
	in := c.decrypted("", cut[0].Client, cut[0].P, t0, func() { noted++ })
	testutil.Feed(cut, 0, t0, in.ClientData, in.ServerData)
	in.CloseClient(exchange.EndFIN, t0)
	in.CloseServer(exchange.EndFIN, t0)
	if want := []string{"ADDED second", "MODIFIED second"}; !slices.Equal(events, want) || noted != 1 || !slices.Contains(kinds, "h2-joined") {
		t.Errorf("events %q, notes %q (decrypted noted %d times); want %q", events, kinds, noted, want)
	}
	// Without MidStream (kwatch stream's own connections) the decrypted
	// board does not join.
	events, kinds = nil, nil
	c = NewBoard(Options{Keys: keylog.New()}).Conn(&record.Conn{ID: 2}, sink)
	in = c.decrypted("", cut[0].Client, cut[0].P, t0, func() {})
	testutil.Feed(cut, 0, t0, in.ClientData, in.ServerData)
	in.CloseClient(exchange.EndFIN, t0)
	in.CloseServer(exchange.EndFIN, t0)
	if len(events) != 0 || slices.Contains(kinds, "h2-joined") {
		t.Errorf("without MidStream: events %q, notes %q", events, kinds)
	}
}
