package tlsconn

// A capture that starts after a TLS 1.3 connection's handshake, with a key
// log that holds the connection's secrets: the key log names connections by
// their ClientHello's random, which the capture never shows, so the
// connection is found by trying. Each key log connection not claimed by a
// captured handshake (keylog.Log.Trials) gives two application traffic
// secrets; each secret, with each TLS 1.3 cipher suite of its hash's
// length, is tried on the direction's first records with every sequence
// number from 0 to trialSeqs-1 (RFC 8446 §5.3: the number of records sent
// under the secret). The first that authenticates a record (AEAD: a
// forgery passes with probability 2^-128) names the connection, its suite,
// which side is the client, and the record's sequence number; the other
// direction then looks for its own over the same window with the other
// secret. What it costs is bounded per capture (keylog.DefaultTrialOpens).

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/kwatch/kwatch/pkg/keylog"
)

const (
	// trialSeqs is how many sequence numbers are tried: a capture that
	// began within 4096 records of the handshake.
	trialSeqs = 4096
	// trialMaxRecord bounds the records tried, in bytes: opening costs in
	// proportion to the record, and a direction's small records (an
	// HTTP/2 PING, WINDOW_UPDATE, SETTINGS ACK) are as good; larger ones
	// are passed over until the state is found.
	trialMaxRecord = 1024
	// trialHoldBytes is how many bytes of larger records a direction
	// holds while the secrets are looked for: within what a direction may
	// hold while it waits for keys (maxWait).
	trialHoldBytes = 32 << 10
	// maxTrials is how many key log connections are tried.
	maxTrials = 64
	// trialMisses is how many records a direction tries before it gives
	// up: no secret and number opened them.
	trialMisses = 8
)

// budgetSpent says why a connection's secrets were not tried (further).
var budgetSpent = fmt.Sprintf("the capture's budget for trying key log secrets (%d record openings) is spent", keylog.DefaultTrialOpens)

// trialState is one secret of a key log connection under one suite.
type trialState struct {
	t      *keylog.Trial
	suite  uint16
	client bool // the secret is the client's
	cs     *cipherState
}

// startTrial sets the connection up to find its secrets among the key
// log's (keylog.Log.Trials), when it has TLS 1.3 ones that no captured
// handshake claimed; false when there are none, or under kwatch attach
// (Options.Joins), whose connections opened before are joined from their
// process instead.
func (c *Conn) startTrial(t time.Time) bool {
	if c.opt.Joins || c.trialTried {
		return false
	}
	c.trialTried = true
	if c.opt.Keys.TrialOpensLeft() < trialSeqs {
		// Not one secret's window left: not worth its states.
		if c.opt.Keys.Given() {
			c.trialWhy = budgetSpent
		}
		return false
	}
	trials, all := c.opt.Keys.Trials(maxTrials)
	for i := range trials {
		tr := &trials[i]
		for _, id := range []uint16{tls.TLS_AES_128_GCM_SHA256, tls.TLS_CHACHA20_POLY1305_SHA256, tls.TLS_AES_256_GCM_SHA384} {
			s := suites[id]
			for _, client := range []bool{true, false} {
				secret := tr.ServerTraffic
				if client {
					secret = tr.ClientTraffic
				}
				if len(secret) != s.hash().Size() {
					continue
				}
				cs, err := newTLS13State(s, secret)
				if err != nil {
					continue
				}
				c.trials = append(c.trials, trialState{t: tr, suite: id, client: client, cs: cs})
			}
		}
	}
	if len(c.trials) == 0 {
		return false
	}
	c.trialCount, c.trialAll = len(trials), all
	c.tls13 = true
	for _, h := range []*direction{c.cl, c.sv} {
		h.enter(phaseApp)
	}
	return true
}

// tryRecord tries the connection's trial states on a record of direction h.
func (c *Conn) tryRecord(h *direction, hdr, body []byte, t time.Time) bool {
	if len(body) > trialMaxRecord {
		// Held while the other direction may show a small record that
		// finds the secrets (pump goes on with this one then); passed
		// over when too much is held.
		if len(h.buf) < trialHoldBytes && c.other(h).live() {
			return false
		}
		h.trialPassed++
		if h.trialMissed > 0 {
			h.trialAfter++
		}
		return true
	}
	seqs := trialSeqs
	if h.trialMissed > 0 {
		// A record of h opened under no secret with any number below
		// trialSeqs: it was under another secret (the handshake's, 0-RTT
		// early data's, a KeyUpdate's: RFC 8446 §7.1, §4.6.3) or numbered
		// past the window, and so are those after it; or the application
		// traffic secret's records begin after it, numbered from 0
		// (§5.3). A record k records after it has a number below k. So a
		// connection whose keys are in no key log spends a whole window
		// on one record a direction, not on each: it leaves the capture's
		// budget to the others.
		h.trialAfter++
		seqs = min(trialSeqs, h.trialAfter)
	}
	want := len(c.trials) * seqs
	if !c.opt.Keys.TakeTrialOpens(want) {
		c.endTrial(h, t, budgetSpent)
		return true
	}
	for seq := uint64(0); seq < uint64(seqs); seq++ {
		for i := range c.trials {
			st := &c.trials[i]
			out, inner, err := st.cs.open(h.plain[:0], hdr, body, seq)
			if err != nil {
				continue
			}
			// Only what was opened is spent.
			c.opt.Keys.ReturnTrialOpens(want - (int(seq)*len(c.trials) + i + 1))
			c.trialFound(h, st, seq, t)
			if cap(out) > cap(h.plain) {
				h.plain = out[:0]
			}
			return c.plain(h, inner, out, t)
		}
	}
	h.trialPassed++
	if h.trialMissed++; h.trialMissed >= trialMisses {
		c.endTrial(h, t, fmt.Sprintf("none of the key log's %d TLS 1.3 connections that no captured handshake claimed opened the %d records of the %s tried with a sequence number below %d (after the first, below their count from it)", c.trialCount, h.trialMissed, h.name(), trialSeqs))
	}
	return true
}

// trialFound takes the state that opened a record of h with sequence number
// seq: h goes on from the next number, the other direction looks for its
// own with the other secret.
func (c *Conn) trialFound(h *direction, st *trialState, seq uint64, t time.Time) {
	s := suites[st.suite]
	c.suite = s
	sender, other := c.rec.Client, c.rec.Server
	if h.server {
		sender, other = other, sender
	}
	j := &keylog.Joined{Version: tls.VersionTLS13, Suite: st.suite,
		ClientTraffic: st.t.ClientTraffic, ServerTraffic: st.t.ServerTraffic}
	j.Client, j.Server = sender, other
	if !st.client {
		j.Client, j.Server = other, sender
	}
	src := st.t.Source
	if src == "" {
		src = "the key log"
	}
	c.joined = j
	c.trialText = fmt.Sprintf("with the secrets %s gave for client random %s, found by trying them (the %s's first record opened with sequence number %d)",
		src, st.t.Random, h.name(), seq)
	if j.Client != c.rec.Client {
		// The capture began with the server's bytes: its side was
		// taken for the client's.
		c.reversed = true
		c.trialText += fmt.Sprintf("; %s is the TLS client (the capture's first packet was the server's): its decrypted bytes are read as the client's", j.Client)
	}
	h.cs = st.cs
	h.cs.seq = seq + 1
	o := c.other(h)
	secret := st.t.ServerTraffic
	if !st.client {
		secret = st.t.ClientTraffic
	}
	if cs, err := newTLS13State(s, secret); err == nil {
		o.cs = cs
		o.window = &seqWindow{from: 0, to: trialSeqs - 1, max: trialMisses}
	} else {
		c.kill(o)
	}
	c.trials = nil
	if h.trialPassed > 0 {
		c.problem(h, h.off, t, "TLS records before the secrets were found",
			fmt.Sprintf("%d records of the %s before the one that opened were not decrypted (larger than %d bytes, or tried before it)", h.trialPassed, h.name(), trialMaxRecord),
			"", true)
	}
}

// endTrial gives the connection up: no trial state opened its records.
func (c *Conn) endTrial(h *direction, t time.Time, why string) {
	c.trials = nil
	c.trialWhy = why
	c.giveUp(h, t, "")
}

// trialSummary says, for a connection given up, what was tried.
func (c *Conn) trialSummary() string {
	if c.trialWhy == "" {
		return ""
	}
	s := "; " + c.trialWhy
	if c.trialAll > c.trialCount {
		s += fmt.Sprintf(" (%d of %d tried)", c.trialCount, c.trialAll)
	}
	return s
}
