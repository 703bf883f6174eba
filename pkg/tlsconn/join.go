package tlsconn

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/tlsrec"
)

// Sequence-number window of a direction joined mid-way: the number read
// from the process is that of the next record it would send when it was
// read, so the first records captured after the join have a number lower
// (sent before the read: a busy connection, such as kube-controller-
// manager's, sends a hundred records in the 20 ms before the state is read)
// or a little higher (sent while kwatch was reading). Each record is tried
// over [seq-seqBelow, seq+seqAbove].
const (
	seqBelow = 1024
	seqAbove = 16
	// maxSeekMisses is how many records of a direction may fail to open
	// over the whole window before the joined state is refused: those
	// sent before the window are such misses.
	maxSeekMisses = 1024
)

// seqWindow is where a joined direction looks for the sequence number of
// its first record.
type seqWindow struct {
	from, to uint64 // inclusive
	misses   int
	max      int // records that may open with no number (0: maxSeekMisses)
}

// join sets the connection up from the state kept for it in the key store
// (keylog.Log.AddJoined), when there is one: each direction with its
// side's traffic secret, looking for its sequence number around the one
// read. It returns false when there is none (or it cannot be used: then
// the connection is given up, and the note says why).
func (c *Conn) join(t time.Time) bool {
	j, ok := c.opt.Keys.LookupJoined(c.rec.Client, c.rec.Server)
	if !ok {
		return false
	}
	s := suites[j.Suite]
	tls13 := j.Version == tls.VersionTLS13
	if s == nil || s.tls13 != tls13 || !tls13 && j.Version != tls.VersionTLS12 {
		c.joined = j // said once; not tried again
		c.unsup = true
		c.noteUndecoded(t, fmt.Sprintf("joined mid-connection, but %s %s is not one kwatch decrypts (AES-GCM and ChaCha20-Poly1305 suites of TLS 1.3 and 1.2)",
			tlsrec.VersionName(j.Version), suiteName(j.Suite)))
		c.gaveUp = true
		for _, d := range []*direction{c.cl, c.sv} {
			c.kill(d)
		}
		return false
	}
	c.joined, c.suite, c.tls13 = j, s, tls13
	var cl12, sv12 *cipherState
	if !tls13 {
		var err error
		if cl12, sv12, err = newTLS12States(s, j.Master, j.ClientRandom, j.ServerRandom); err != nil {
			c.problem(c.cl, c.cl.off, t, "TLS state read from the process is unusable", err.Error(), "", false)
			c.gaveUp = true
			for _, d := range []*direction{c.cl, c.sv} {
				c.kill(d)
			}
			return false
		}
	}
	for _, h := range []*direction{c.cl, c.sv} {
		// The secret of the bytes an endpoint sends is its side's.
		sender := c.rec.Client
		if h.server {
			sender = c.rec.Server
		}
		client := sender == j.Client
		secret, seq, cs12 := j.ServerTraffic, j.ServerSeq, sv12
		if client {
			secret, seq, cs12 = j.ClientTraffic, j.ClientSeq, cl12
		}
		if !tls13 {
			h.cs = cs12
			h.enter(phaseApp)
			h.window = &seqWindow{from: seq - min(seq, seqBelow), to: seq + seqAbove}
			continue
		}
		cs, err := newTLS13State(s, secret)
		if err != nil {
			c.problem(h, h.off, t, "TLS state read from the process is unusable", err.Error(),
				"the traffic secret is not of this cipher suite's hash length", false)
			c.kill(h)
			continue
		}
		h.cs = cs
		h.enter(phaseApp)
		h.window = &seqWindow{from: seq - min(seq, seqBelow), to: seq + seqAbove}
	}
	return true
}

// seek opens a joined direction's record with each sequence number of its
// window: the first that authenticates is the record's, and the direction
// goes on from the next. A record no number opens is skipped (sent before
// the window, or not this state's); past maxSeekMisses of them the state
// is refused.
func (c *Conn) seek(h *direction, hdr, body []byte, t time.Time) bool {
	w := h.window
	for seq := w.from; seq <= w.to; seq++ {
		out, inner, err := h.cs.open(h.plain[:0], hdr, body, seq)
		if err != nil {
			continue
		}
		h.window = nil
		h.cs.seq = seq + 1
		if cap(out) > cap(h.plain) {
			h.plain = out[:0]
		}
		return c.plain(h, inner, out, t)
	}
	h.skipped++
	limit := w.max
	if limit == 0 {
		limit = maxSeekMisses
	}
	if w.misses++; w.misses > limit {
		kind, hint := "TLS state read from the process does not decrypt", "the state was read from the wrong connection, or the process changed keys (KeyUpdate) before it was read"
		if c.trialText != "" {
			kind, hint = "TLS secrets found by trying do not decrypt the other direction", "the connection changed keys (KeyUpdate), or sent more records than were tried before the capture began"
		}
		c.problem(h, h.off, t, kind,
			fmt.Sprintf("%d records of the %s did not open with its traffic secret and any sequence number from %d to %d", w.misses, h.name(), w.from, w.to),
			hint, false)
		h.window = nil
		c.kill(h)
	}
	return true
}

// noteJoined is noteDecrypted for a connection joined mid-way.
func (c *Conn) noteJoined(t time.Time) {
	j := c.joined
	suite := tlsrec.VersionName(j.Version) + " " + suiteName(j.Suite)
	src := ""
	switch {
	case c.trialText != "":
		src = " " + c.trialText
	case j.Source != "":
		src = " with the state read from " + j.Source
	}
	c.sink.Emit(&record.ConnNote{Conn: c.rec, Time: t, Kind: "tls-decrypted", Suite: suite,
		Message: suite + ", joined mid-connection (its handshake was not seen): decrypted" + src})
}
