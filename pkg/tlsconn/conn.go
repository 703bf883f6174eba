// Package tlsconn follows one captured TLS connection (RFC 8446 TLS 1.3, RFC
// 5246 TLS 1.2) and decrypts it with secrets from a key log (pkg/keylog):
// it reads the record layer of both directions, the hellos in the clear, and
// with the connection's secrets derives the record keys (TLS 1.3 key
// schedule from the logged traffic secrets, RFC 8446 §7; TLS 1.2 key block
// from the master secret, RFC 5246 §6.3), follows KeyUpdate (RFC 8446
// §4.6.3), and hands the decrypted application data, with the server's
// ALPN choice, to the follower Options.Inner makes (pkg/wire decides there
// whether the decrypted bytes are HTTP/2 or HTTP/1.1): it knows no
// protocol inside TLS.
//
// No Go library decrypts a captured TLS session (crypto/tls only takes part
// in one), so the record layer is read here; every cipher, AEAD and KDF is
// the standard library's or golang.org/x/crypto's.
package tlsconn

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/tlsrec"
)

// Record content types (RFC 8446 §5.1).
const (
	typeChangeCipherSpec = 20
	typeAlert            = 21
	typeHandshake        = 22
	typeApplicationData  = 23
)

// Handshake message types (RFC 8446 §4, RFC 5246 §7.4).
const (
	msgClientHello         = 1
	msgServerHello         = 2
	msgNewSessionTicket    = 4
	msgEncryptedExtensions = 8
	msgFinished            = 20
	msgKeyUpdate           = 24
)

// maxCiphertext bounds a record's length field: 2^14 + 2048 (RFC 5246
// §6.2.3; TLS 1.3 allows 2^14 + 256, RFC 8446 §5.2).
const maxCiphertext = 1<<14 + 2048

// maxWait bounds the bytes one direction holds while it waits for the keys
// of its connection (a key log still being written, a Decryption Secrets
// Block further on in the capture, the other direction's ServerHello).
// Beyond one record's worth they are reserved from the shared budget.
const maxWait = 64 << 10

// maxResyncTries bounds the record openings tried after one gap that took
// the record framing with it; maxResyncTotal bounds them over all the gaps
// of a direction (a crafted capture can put a gap before every record).
const (
	maxResyncTries = 4096
	maxResyncTotal = 65536
)

// Options tune a Conn.
type Options struct {
	// Keys holds the secrets; a Conn looks its connection up by the
	// ClientHello's random. Never nil.
	Keys *keylog.Log
	// Joins says that the state of a connection whose handshake was not
	// seen may come into Keys (keylog.Log.AddJoined: kwatch attach reads
	// it from the process): such a connection's records wait for it (up
	// to 64 KiB a direction), then decrypt from the middle on.
	Joins bool
	// MaxWaitBytes, when not 0, bounds the bytes a direction holds while
	// it waits for keys, instead of 64 KiB: kwatch attach gets secrets
	// from the process some milliseconds after the handshake (up to 20
	// ms, pkg/gotls), and a server may send a large LIST meanwhile. What
	// is held counts against Budget too.
	MaxWaitBytes int
	// KeySource, when set, names where secrets come from when that is not
	// a key log (kwatch attach: "the processes attached"), for the note of
	// a connection without them; Missed, when set, is the note of a
	// connection whose handshake was not seen.
	KeySource, Missed string
	// NoWait says that no secrets can come later than they are looked
	// for (no key log file that may grow, no pcapng blocks to come): a
	// connection without them is given up at once, not held up to 64 KiB
	// a direction in case they come.
	NoWait bool
	// Budget, if set, bounds the record bytes held while they wait for
	// keys or for the rest of a record, shared with other connections.
	Budget *event.Budget
	// Locate, if set, completes every Problem with where its bytes came
	// from (capture file and packet number).
	Locate func(*record.Problem)
	// Inner makes the follower of the decrypted bytes, at the first
	// application data (RFC 8446 §5.2, RFC 5246 §6.2.1): alpn is the
	// protocol the server chose ("" when not seen, as when TLS 1.3's
	// EncryptedExtensions could not be read); server and first say which
	// direction sent the first decrypted bytes and what they are (maybe
	// none). It must call decrypted, which emits the connection's note
	// that it is decrypted, once: after marking the connection's record
	// (record.Conn.HTTP2; records never change once emitted) and before
	// emitting anything of its own. Never nil.
	Inner func(alpn string, server bool, first []byte, t time.Time, decrypted func()) exchange.Follower
	// InnerJoined, if set, is Inner for a connection joined mid-way
	// (Options.Joins): its first decrypted bytes may be anywhere in an
	// HTTP message or between HTTP/2 frames. Unset, Inner is used.
	InnerJoined func(alpn string, server bool, first []byte, t time.Time, decrypted func()) exchange.Follower
}

// Conn follows one TLS connection. It implements exchange.Follower: feed it
// both directions' bytes in any split, and their gaps and ends.
type Conn struct {
	rec  *record.Conn
	sink record.Sink
	opt  Options
	cl   *direction
	sv   *direction
	// ch and sh are the ClientHello and the ServerHello (not a
	// HelloRetryRequest) once read.
	ch, sh  *tlsrec.Hello
	suite   *suite
	tls13   bool
	secrets *keylog.Secrets
	alpn    string // the server's ALPN choice, once known
	// inner is the follower of the decrypted bytes, made at the first
	// application data (Options.Inner).
	inner  exchange.Follower
	noted  bool // the connection's TLS note was emitted
	gaveUp bool // the connection cannot be decrypted: said once
	unsup  bool // the cipher suite is one kwatch does not decrypt
	// helloErr describes a hello that could not be read.
	helloErr string
	// waitSince is when a record first waited for keys.
	waitSince time.Time
	// authFailed: a record did not authenticate under the logged keys.
	authFailed bool
	last       time.Time
	// joined is the state the connection was joined with, mid-way
	// (Options.Joins); nil otherwise.
	joined *keylog.Joined
	// trials are the key log's secrets being tried on a connection whose
	// handshake was not captured (trial.go); trialTried says they were
	// looked for; trialCount and trialAll are how many key log
	// connections were tried, of how many; trialText says how the
	// secrets were found, trialWhy why none were.
	trials               []trialState
	trialTried           bool
	trialCount, trialAll int
	trialText, trialWhy  string
	// reversed: the side the capture took for the client is the TLS
	// server (the secrets found by trying said so); the decrypted bytes
	// go to their follower the right way round.
	reversed bool
}

// New returns a Conn that reports records of connection rec to sink.
func New(rec *record.Conn, sink record.Sink, opt Options) *Conn {
	c := &Conn{rec: rec, sink: sink, opt: opt}
	c.cl = &direction{c: c}
	c.sv = &direction{c: c, server: true}
	return c
}

// direction is one direction of the connection.
type direction struct {
	c      *Conn
	server bool
	// buf holds the bytes of records not handled yet; off is the stream
	// offset of buf[0]. Between writes buf is a slice of store (or nil).
	buf   []byte
	store []byte
	off   int64
	// came dates the bytes held in buf past a call (records that wait
	// for keys: kwatch attach reads a joined connection's state at its
	// next use): the stream offset just past the bytes that came at each
	// time, ascending, at most maxCame (bytes past them are dated by
	// when they are handled). A record handled later than it came is
	// dated by when its last byte came, so that what it carries (a PING,
	// an event) keeps its own time.
	came []arrival
	// reserved counts the bytes of buf reserved from the shared budget
	// while waiting for keys.
	reserved int64
	hs       hsReader
	// phase is what protects the records, or that they are no longer
	// read (phase.go); it changes only in enter.
	phase phase
	cs    *cipherState
	// switchApp: the handshake ended with the record just read (its
	// Finished), so the next record is phaseApp's; update: a KeyUpdate
	// came, so the next record uses the next application keys.
	switchApp, update bool
	// window is set while a direction joined mid-way looks for the
	// sequence number of its first record (join.go).
	window *seqWindow
	// trialPassed counts the records passed over while the connection's
	// secrets were tried (trial.go), trialMissed those tried in vain,
	// trialAfter those since the first tried in vain.
	trialPassed, trialMissed, trialAfter int
	// awaitTraffic: the handshake ended before the direction's traffic
	// secret was known and secrets may still come (not Options.NoWait: a
	// key source such as an uprobe hands them over while packets flow);
	// its records wait for it.
	awaitTraffic bool
	// skipped counts records skipped in phaseTrial, and 0-RTT records.
	skipped int
	// skip counts bytes of a record cut by a gap still to come; resync
	// is set when a gap took the record framing with it; lost counts the
	// bytes lost since the last record handed on (for the follower's gap).
	skip   int64
	resync bool
	lost   int64
	// decrypted counts records decrypted (for notes and tests).
	decrypted int
	// plain holds a record's decrypted bytes (reused record to record).
	plain   []byte
	pumping bool // pump is running on this direction
	// lostRecords counts the whole records in lost (header to tag).
	lostRecords int
	// pendingSeq counts protected records lost before the direction's
	// keys were known: its first sequence number once they are.
	pendingSeq uint64
	// hsLost: bytes of the handshake were lost; its messages are not
	// read any more.
	hsLost bool
	// resyncOpens and resyncScanned count the record openings tried and
	// the bytes scanned since the gap that took the framing.
	resyncOpens   int
	resyncScanned int64
	resyncTotal   int // record openings tried over all gaps
}

// overhead is what a protected record adds to its plaintext, in bytes: the
// header, TLS 1.2 AES-GCM's explicit nonce, the AEAD tag, and TLS 1.3's
// inner content type (RFC 8446 §5.2, RFC 5288 §3).
func (h *direction) overhead() int64 {
	n := int64(5 + 16)
	switch {
	case h.c.tls13:
		n++
	case h.cs != nil && len(h.cs.iv) == 4:
		n += 8
	}
	return n
}

func (h *direction) name() string {
	if h.server {
		return "server"
	}
	return "client"
}

// ClientData feeds bytes the client sent, seen at time t.
func (c *Conn) ClientData(p []byte, t time.Time) { c.data(c.cl, p, t) }

// ServerData feeds bytes the server sent, seen at time t.
func (c *Conn) ServerData(p []byte, t time.Time) { c.data(c.sv, p, t) }

// ClientGap reports n bytes the client sent that were not captured.
func (c *Conn) ClientGap(n int64, t time.Time) { c.gap(c.cl, n, t) }

// ServerGap reports n bytes the server sent that were not captured.
func (c *Conn) ServerGap(n int64, t time.Time) { c.gap(c.sv, n, t) }

// CloseClient ends the client's byte stream.
func (c *Conn) CloseClient(how exchange.Ending, t time.Time) { c.close(c.cl, how, t) }

// CloseServer ends the server's byte stream.
func (c *Conn) CloseServer(how exchange.Ending, t time.Time) { c.close(c.sv, how, t) }

// arrival is when the bytes of a direction up to a stream offset came.
type arrival struct {
	end int64
	t   time.Time
}

// maxCame bounds direction.came.
const maxCame = 1024

// dated returns when the bytes of the direction up to stream offset end
// came: t (now) unless they were held since an earlier call.
func (h *direction) dated(end int64, t time.Time) time.Time {
	for _, a := range h.came {
		if a.end >= end {
			if a.t.Before(t) {
				return a.t
			}
			break
		}
	}
	return t
}

func (c *Conn) data(h *direction, p []byte, t time.Time) {
	c.last = t
	if !h.live() {
		h.off += int64(len(p))
		return
	}
	defer func() {
		// Bytes still held after this call: dated by now.
		for len(h.came) > 0 && h.came[0].end <= h.off {
			h.came = h.came[1:]
		}
		if end := h.off + int64(len(h.buf)); len(h.buf) > 0 && len(h.came) < maxCame && (len(h.came) == 0 || h.came[len(h.came)-1].end < end) {
			h.came = append(h.came, arrival{end, t})
		}
	}()
	if len(h.buf) == 0 {
		// The records complete in p are read where they are; only
		// what is left (a record cut by the end of p, or records that
		// wait for keys) is copied, into store.
		h.buf = p
		c.pump(h, t)
		if len(h.buf) > 0 {
			h.keep(h.buf, nil)
		}
	} else {
		h.keep(h.buf, p)
		c.pump(h, t)
	}
	if len(h.buf) == 0 && cap(h.store) > keptStore {
		h.store = nil
	}
	c.hold(h)
}

// keptStore is the largest store a direction keeps while it holds nothing
// (bytes): more was needed only while records waited for keys.
const keptStore = 64 << 10

// keep sets buf to rest followed by p, in store, so that each byte is
// copied about once: rest is either buf (a slice of store; appended to
// in place while store has room after it, else moved to store's front)
// or bytes of the caller's (p is nil then). store grows to twice what is
// needed.
func (h *direction) keep(rest, p []byte) {
	n := len(rest) + len(p)
	switch {
	case len(p) > 0 && n <= cap(rest):
		h.buf = append(rest, p...)
		return
	case n > len(h.store):
		ns := make([]byte, max(2*n, 32<<10))
		copy(ns, rest)
		h.store = ns
	default:
		copy(h.store, rest) // copy handles the overlap when rest is in store
	}
	h.buf = append(h.store[:len(rest)], p...)
}

// random is the ClientHello's random, which names the connection in a key
// log. c.ch is set.
func (c *Conn) random() keylog.Random { return keylog.Random(c.ch.Random) }

func (c *Conn) other(h *direction) *direction {
	if h == c.cl {
		return c.sv
	}
	return c.cl
}

// maxWait is what a direction may hold while it waits for keys:
// Options.MaxWaitBytes, or maxWait.
func (c *Conn) maxWait() int {
	if c.opt.MaxWaitBytes > 0 {
		return c.opt.MaxWaitBytes
	}
	return maxWait
}

// hold bounds what a direction keeps: past unreservedBytes from the shared
// budget, and, waiting for keys, never past maxWait.
func (c *Conn) hold(h *direction) {
	if !h.live() {
		return
	}
	want := max(0, int64(len(h.buf))-unreservedBytes)
	if want <= h.reserved {
		return
	}
	waiting := len(h.buf) > 5+maxCiphertext // more than a record: waiting for keys
	if waiting && len(h.buf) > c.maxWait() {
		c.giveUp(h, c.last, fmt.Sprintf("%d bytes waited for keys", len(h.buf)))
		return
	}
	if !c.opt.Budget.Reserve(want - h.reserved) {
		if waiting {
			c.giveUp(h, c.last, fmt.Sprintf("%d bytes waited for keys, and the buffers of all connections are full", len(h.buf)))
			return
		}
		c.problem(h, h.off, c.last, event.KindBudget,
			fmt.Sprintf("a TLS record in progress (%d bytes held) does not fit", len(h.buf)),
			"the rest of this direction is not decrypted; raise --max-buffered-bytes-total", false)
		c.kill(h)
		return
	}
	h.reserved = want
}

// unreservedBytes is what a direction may hold without reserving it from
// the shared budget: a few small records.
const unreservedBytes = 4 << 10

func (h *direction) release() {
	h.c.opt.Budget.Release(h.reserved)
	h.reserved = 0
}

// drop forgets the first n bytes of buf.
func (h *direction) drop(n int) {
	h.off += int64(n)
	h.buf = h.buf[n:]
	k := 0
	for k < len(h.came) && h.came[k].end <= h.off {
		k++
	}
	if k > 0 {
		h.came = append(h.came[:0], h.came[k:]...)
	}
	if len(h.buf) == 0 {
		h.buf = nil
	}
	if want := max(0, int64(len(h.buf))-unreservedBytes); want < h.reserved {
		h.c.opt.Budget.Release(h.reserved - want)
		h.reserved = want
	}
}

// pump handles the complete records in buf, as far as keys allow. After
// each record the other direction goes on as far as it can too: what one
// direction learnt (the ServerHello, keys) may let the other go on, and
// records come out in the order the bytes came.
func (c *Conn) pump(h *direction, t time.Time) {
	if h.pumping {
		return
	}
	h.pumping = true
	defer func() { h.pumping = false }()
	o := c.other(h)
	if len(o.buf) > 0 && o.live() {
		c.pump(o, t)
	}
	for h.live() {
		if h.skip > 0 {
			n := int(min(h.skip, int64(len(h.buf))))
			h.lost += int64(n)
			h.drop(n)
			h.skip -= int64(n)
			if h.skip > 0 {
				return
			}
		}
		if h.resync && !c.resync(h, t) {
			return
		}
		if len(h.buf) < 5 {
			return
		}
		typ, n := h.buf[0], int(binary.BigEndian.Uint16(h.buf[3:5]))
		if typ < typeChangeCipherSpec || typ > typeApplicationData || h.buf[1] != 3 || n > maxCiphertext {
			c.problem(h, h.off, t, "not a TLS record",
				fmt.Sprintf("record header % x (type %d, version %d.%d, length %d bytes)", h.buf[:5], typ, h.buf[1], h.buf[2], n),
				"the rest of this direction cannot be decrypted", false)
			c.kill(h)
			return
		}
		if len(h.buf) < 5+n {
			return
		}
		if !c.record(h, h.buf[:5], h.buf[5:5+n], h.dated(h.off+int64(5+n), t)) {
			// Waits for keys or for the other direction: if they never
			// come, the note is dated by when the wait began.
			if c.waitSince.IsZero() {
				c.waitSince = t
			}
			if c.opt.NoWait && c.sh != nil && c.suite != nil && !c.gaveUp {
				c.giveUp(h, t, "")
			}
			return
		}
		if h.live() {
			h.drop(5 + n)
		}
		if len(o.buf) > 0 && o.live() {
			c.pump(o, t)
		}
	}
}

// kill stops decoding a direction.
func (c *Conn) kill(h *direction) {
	h.enter(phaseDead)
	h.off += int64(len(h.buf))
	h.buf = nil
	h.release()
}

// record handles one record; it returns false when the record must wait
// (for the ServerHello or for keys), to be handled again later.
func (c *Conn) record(h *direction, hdr, body []byte, t time.Time) bool {
	typ := hdr[0]
	// In TLS 1.3 every protected record is application_data on the
	// outside (RFC 8446 §5.2): a handshake or alert record is in the
	// clear whatever came before (a second ClientHello after a
	// HelloRetryRequest), and change_cipher_spec is only there for
	// middleboxes (§D.4).
	clear := !h.protected() || c.tls13 && typ != typeApplicationData
	if clear {
		switch typ {
		case typeHandshake:
			c.handshake(h, body, t, false)
			return true
		case typeChangeCipherSpec:
			switch {
			case c.sh != nil && !c.tls13:
				h.enter(phaseProtected) // RFC 5246 §7.1: what follows is protected
			case c.sh == nil && !h.server && !c.gaveUp:
				return false // the client's: TLS 1.2's or 1.3's? The ServerHello says.
			}
			// TLS 1.3's compatibility CCS, or the server's after a
			// HelloRetryRequest (its ServerHello comes next).
			return true
		case typeAlert:
			c.alert(h, body, t)
			return true
		}
		// Application data in the clear: protected records whose
		// start the capture did not show.
		switch {
		case c.ch == nil && c.sh == nil && c.joined == nil && (c.join(t) || c.startTrial(t)):
			// Joined mid-way, or its secrets tried from the key log:
			// both directions are protected now.
		case c.ch == nil && c.sh == nil && c.opt.Joins && !c.opt.NoWait && !c.gaveUp && c.joined == nil:
			return false // the state may still come from the process
		case c.ch == nil && c.sh == nil:
			c.giveUp(h, t, "")
			return true
		case c.sh == nil && !c.gaveUp:
			return false // the ServerHello may still come (the other direction)
		case c.sh != nil:
			h.enter(phaseProtected) // its ChangeCipherSpec was lost
		default:
			return true
		}
	}
	if c.gaveUp || c.unsup {
		return true
	}
	if c.trials != nil && h.cs == nil {
		return c.tryRecord(h, hdr, body, t)
	}
	if c.suite == nil {
		return false
	}
	if h.awaitTraffic && !c.trafficKeys(h, t) {
		return false
	}
	if h.cs == nil && !c.keys(h, t) {
		return false
	}
	if h.window != nil {
		return c.seek(h, hdr, body, t)
	}
	seq := h.cs.seq
	if h.phase == phaseTrial {
		// Is it the first record under the application keys?
		out, inner, err := h.cs.open(h.plain[:0], hdr, body, 0)
		if err != nil {
			h.skipped++
			return true
		}
		h.enter(phaseApp)
		h.cs.seq = 1
		c.handshakeLoss(h, t)
		return c.plain(h, inner, out, t)
	}
	out, inner, err := h.cs.open(h.plain[:0], hdr, body, seq)
	if cap(out) > cap(h.plain) {
		h.plain = out[:0] // reused: the followers copy what they keep
	}
	if err != nil && c.tls13 && h.phase != phaseApp {
		// Not under the handshake keys. The handshake's end (its
		// Finished) may have been lost: is it the first record under
		// the application keys? Or, from a client that has not yet
		// sent a handshake record, 0-RTT early data, whose key
		// (CLIENT_EARLY_TRAFFIC_SECRET) kwatch does not use.
		if out, inner, ok := c.tryAppKeys(h, hdr, body); ok {
			c.handshakeLoss(h, t)
			return c.plain(h, inner, out, t)
		}
		if !h.server && c.ch != nil && c.ch.EarlyData && h.decrypted == 0 && h.skipped < maxEarlyRecords {
			if h.skipped == 0 {
				c.note(t, "tls", "client record before its handshake records does not decrypt: 0-RTT early data, skipped (kwatch does not use CLIENT_EARLY_TRAFFIC_SECRET)")
			}
			h.skipped++
			return true
		}
	}
	if err != nil {
		why := "the key in the key log is not this connection's, or the record was changed"
		switch {
		case h.lost > 0:
			why = "bytes lost before it in the capture took the record sequence with them"
		case h.decrypted > 0:
			why = "earlier records decrypted with this key: this one was changed, or records before it went missing unseen"
		}
		c.problem(h, h.off, t, "TLS record does not authenticate",
			fmt.Sprintf("%d-byte record with sequence number %d: %v", len(body), seq, err), why, false)
		c.authFailed = true
		c.kill(h)
		return true
	}
	h.cs.seq++
	return c.plain(h, inner, out, t)
}

// maxEarlyRecords bounds the client records skipped as 0-RTT early data.
const maxEarlyRecords = 64

// tryAppKeys opens a TLS 1.3 record under the direction's application
// traffic keys at sequence number 0 (when the secret is known); on
// success the direction is in its application phase from there.
func (c *Conn) tryAppKeys(h *direction, hdr, body []byte) ([]byte, byte, bool) {
	secret := c.secrets.ClientTraffic
	if h.server {
		secret = c.secrets.ServerTraffic
	}
	if secret == nil {
		return nil, 0, false
	}
	cs, err := newTLS13State(c.suite, secret)
	if err != nil {
		return nil, 0, false
	}
	out, inner, err := cs.open(nil, hdr, body, 0)
	if err != nil {
		return nil, 0, false
	}
	cs.seq = 1
	h.cs, h.switchApp = cs, false
	h.enter(phaseApp)
	return out, inner, true
}

// handshakeLoss is called when a direction reaches its application data
// with bytes lost during its handshake: they held handshake messages, not
// application data, so the HTTP follower is not told of them; a warning
// says where they went.
func (c *Conn) handshakeLoss(h *direction, t time.Time) {
	if h.lost == 0 {
		return
	}
	c.problem(h, h.off, t, "bytes lost in the TLS handshake",
		fmt.Sprintf("%d bytes of the %s's handshake records were not captured", h.lost, h.name()),
		"the application data after them decrypts", true)
	h.lost, h.lostRecords = 0, 0
}

// plain handles the content of a decrypted record.
func (c *Conn) plain(h *direction, typ byte, p []byte, t time.Time) bool {
	h.decrypted++
	switch typ {
	case typeApplicationData:
		c.deliver(h, p, t)
	case typeHandshake:
		c.handshake(h, p, t, true)
	case typeAlert:
		c.alert(h, p, t)
	}
	if h.switchApp || h.update {
		c.nextKeys(h, t)
	}
	return true
}

// keys sets up the direction's record protection; false when its secrets
// are not known (yet).
func (c *Conn) keys(h *direction, t time.Time) bool {
	if c.ch == nil {
		return false
	}
	if !c.lookup(h) {
		return false
	}
	s := c.secrets
	if !c.tls13 {
		cl, sv, err := newTLS12States(c.suite, s.Master, c.ch.Random, c.sh.Random)
		if err != nil {
			c.problem(h, h.off, t, "TLS keys cannot be derived", err.Error(), "", false)
			c.kill(h)
			return true
		}
		// Each direction starts at sequence number 0 with its first
		// protected record (RFC 5246 §6.1).
		if h.server {
			h.cs = sv
		} else {
			h.cs = cl
		}
		h.cs.seq, h.pendingSeq = h.pendingSeq, 0
		return true
	}
	hs, app := s.ClientHandshake, s.ClientTraffic
	if h.server {
		hs, app = s.ServerHandshake, s.ServerTraffic
	}
	secret := hs
	if hs == nil {
		secret = app
		h.enter(phaseTrial)
	} else if h.phase == phaseApp {
		secret = app
	}
	cs, err := newTLS13State(c.suite, secret)
	if err != nil {
		c.problem(h, h.off, t, "TLS keys cannot be derived", err.Error(), "the logged secret is not of this cipher suite's hash length", false)
		c.kill(h)
		return true
	}
	h.cs = cs
	if h.phase != phaseTrial {
		h.cs.seq = h.pendingSeq
	}
	h.pendingSeq = 0
	return true
}

// lookup finds the connection's secrets for direction h: true when the
// ones it needs are known.
func (c *Conn) lookup(h *direction) bool {
	has := func(s *keylog.Secrets) bool {
		if s == nil {
			return false
		}
		if !c.tls13 {
			return s.Master != nil
		}
		if h.server {
			return s.ServerHandshake != nil || s.ServerTraffic != nil && h.phase != phaseApp
		}
		return s.ClientHandshake != nil || s.ClientTraffic != nil && h.phase != phaseApp
	}
	if has(c.secrets) {
		return true
	}
	s, ok := c.opt.Keys.Lookup(c.random())
	if !ok {
		return false
	}
	c.secrets = s
	return has(s)
}

// trafficKeys sets up the direction's application traffic keys once its
// secret, awaited since its handshake ended (awaitTraffic), is known: false
// while it is not.
func (c *Conn) trafficKeys(h *direction, t time.Time) bool {
	s, ok := c.opt.Keys.Lookup(c.random())
	if !ok {
		return false
	}
	secret := s.ClientTraffic
	if h.server {
		secret = s.ServerTraffic
	}
	if secret == nil {
		return false
	}
	c.secrets, h.awaitTraffic = s, false
	cs, err := newTLS13State(c.suite, secret)
	if err != nil {
		c.problem(h, h.off, t, "TLS keys cannot be derived", err.Error(), "", false)
		c.kill(h)
		return true
	}
	h.cs = cs
	c.handshakeLoss(h, t)
	return true
}

// Retry goes on with the records that wait for keys, in both directions,
// at time t: a key source that hands secrets over while packets flow (an
// uprobe) calls it when new secrets came, since no more bytes may come to
// make the connection look again (a quiet watch).
//
// The server's direction is pumped first, and so the client's before it
// (pump lets the other direction go first): what waited is most often a
// request and the response to it.
func (c *Conn) Retry(t time.Time) {
	for _, h := range []*direction{c.sv, c.cl} {
		if len(h.buf) > 0 && h.live() {
			c.pump(h, t)
		}
	}
}

// nextKeys switches the direction to its application traffic keys after
// its Finished (TLS 1.3), or to the next generation after a KeyUpdate.
func (c *Conn) nextKeys(h *direction, t time.Time) {
	if h.switchApp {
		h.switchApp = false
		h.enter(phaseApp)
		secret := c.secrets.ClientTraffic
		if h.server {
			secret = c.secrets.ServerTraffic
		}
		if secret == nil {
			// Handshake secrets without the traffic ones: they may
			// still come (a key log being written).
			if s, ok := c.opt.Keys.Lookup(c.random()); ok {
				c.secrets = s
				secret = s.ClientTraffic
				if h.server {
					secret = s.ServerTraffic
				}
			}
		}
		if secret == nil && !c.opt.NoWait {
			// The traffic secret may still come: the records wait.
			h.cs, h.awaitTraffic = nil, true
			return
		}
		if secret == nil {
			c.problem(h, h.off, t, "no TLS key for this connection",
				fmt.Sprintf("the key log has the handshake secrets of client random %s but not its %s", c.random(), map[bool]string{true: keylog.LabelServerTraffic0, false: keylog.LabelClientTraffic0}[h.server]),
				"log all of the connection's secrets", false)
			c.kill(h)
			return
		}
		cs, err := newTLS13State(c.suite, secret)
		if err != nil {
			c.problem(h, h.off, t, "TLS keys cannot be derived", err.Error(), "", false)
			c.kill(h)
			return
		}
		h.cs = cs
		c.handshakeLoss(h, t)
	}
	if h.update {
		h.update = false
		cs, err := h.cs.next(c.suite)
		if err != nil {
			c.problem(h, h.off, t, "TLS keys cannot be derived", err.Error(), "", false)
			c.kill(h)
			return
		}
		h.cs = cs
		c.note(t, "tls-key-update", fmt.Sprintf("%s KeyUpdate: the %s's next records use its next traffic secret", h.name(), h.name()))
	}
}

// handshake reads handshake messages: the hellos in the clear, and in TLS
// 1.3 the protected EncryptedExtensions (ALPN), Finished and KeyUpdate.
func (c *Conn) handshake(h *direction, p []byte, t time.Time, protected bool) {
	if h.hsLost {
		return
	}
	off := h.off // the record's: where its problems are
	h.hs.feed(p, func(typ byte, body []byte) {
		if !h.live() || c.gaveUp {
			return // the connection was given up by an earlier message
		}
		switch typ {
		case msgClientHello:
			if h.server || protected || body == nil {
				return
			}
			ch, err := tlsrec.ParseClientHello(body)
			if err != nil {
				c.helloErr = "TLS handshake whose ClientHello could not be read (" + err.Error() + ")"
				c.helloProblem(h, off, t, err)
				c.giveUp(h, t, "")
				return
			}
			if c.ch == nil {
				c.ch = ch
			}
		case msgServerHello:
			if !h.server || protected || body == nil || c.sh != nil {
				return
			}
			sh, err := tlsrec.ParseServerHello(body)
			if err != nil {
				c.helloErr = "TLS handshake whose ServerHello could not be read (" + err.Error() + ")"
				if c.ch != nil {
					c.helloErr += ", after a ClientHello (" + c.ch.String() + ")"
				}
				c.helloProblem(h, off, t, err)
				c.giveUp(h, t, "")
				return
			}
			if sh.IsHelloRetryRequest() {
				return // a second ClientHello (same random) follows
			}
			c.sh = sh
			c.tls13 = sh.Version == 0x0304
			if len(sh.ALPN) == 1 {
				c.alpn = sh.ALPN[0]
			}
			s := suites[sh.CipherSuite]
			if s == nil || s.tls13 != c.tls13 {
				c.unsup = true
				if c.opt.Keys.Given() {
					c.problem(h, off, t, "TLS cipher suite not decrypted",
						fmt.Sprintf("%s negotiated %s", tlsrec.VersionName(sh.Version), suiteName(sh.CipherSuite)),
						"kwatch decrypts AES-GCM and ChaCha20-Poly1305 suites", false)
				}
				c.noteUndecoded(t, "cipher suite "+suiteName(sh.CipherSuite)+" is not one kwatch decrypts")
				return
			}
			c.suite = s
			if c.tls13 {
				// Everything after the ServerHello is protected, both
				// ways (RFC 8446 §2).
				c.sv.enter(phaseProtected)
				c.cl.enter(phaseProtected)
			}
		case msgEncryptedExtensions:
			if h.server && body != nil {
				if alpn := encryptedALPN(body); alpn != "" {
					c.alpn = alpn
				}
			}
		case msgFinished:
			if c.tls13 && protected && h.phase != phaseApp {
				h.switchApp = true
			}
		case msgKeyUpdate:
			if c.tls13 && protected && h.phase == phaseApp {
				h.update = true
			}
		case msgNewSessionTicket:
		}
	})
	if h.hs.err != "" {
		if h.live() && !c.gaveUp {
			c.problem(h, off, t, "TLS handshake message too long", h.hs.err, "", true)
		}
		h.hs.err = ""
	}
}

// encryptedALPN returns the protocol an EncryptedExtensions message chose
// (RFC 8446 §4.3.1, RFC 7301 §3.1), "" when none.
func encryptedALPN(body []byte) string {
	if len(body) < 2 {
		return ""
	}
	exts := body[2:]
	if n := int(binary.BigEndian.Uint16(body)); n < len(exts) {
		exts = exts[:n]
	}
	for len(exts) >= 4 {
		typ, n := binary.BigEndian.Uint16(exts), int(binary.BigEndian.Uint16(exts[2:]))
		if len(exts) < 4+n {
			return ""
		}
		data := exts[4 : 4+n]
		exts = exts[4+n:]
		if typ != 16 || len(data) < 3 {
			continue
		}
		if l := int(data[2]); len(data) >= 3+l {
			return string(data[3 : 3+l])
		}
	}
	return ""
}

// alert notes an alert (RFC 8446 §6): close_notify ends the direction's
// data; a fatal one ends the connection.
func (c *Conn) alert(h *direction, p []byte, t time.Time) {
	if len(p) < 2 {
		return
	}
	level, desc := p[0], p[1]
	if desc == 0 {
		c.note(t, "tls-alert", h.name()+" sent close_notify (TLS alert 0): its data ends here")
		return
	}
	what := "warning"
	if level == 2 {
		what = "fatal"
	}
	c.note(t, "tls-alert", fmt.Sprintf("%s sent a %s TLS alert %d (%s)", h.name(), what, desc, alertName(desc)))
}

func alertName(d byte) string {
	switch d {
	case 10:
		return "unexpected_message"
	case 20:
		return "bad_record_mac"
	case 40:
		return "handshake_failure"
	case 42:
		return "bad_certificate"
	case 46:
		return "certificate_unknown"
	case 48:
		return "unknown_ca"
	case 70:
		return "protocol_version"
	case 80:
		return "internal_error"
	case 90:
		return "user_canceled"
	case 109:
		return "missing_extension"
	case 112:
		return "unrecognized_name"
	case 116:
		return "certificate_required"
	case 120:
		return "no_application_protocol"
	}
	return "see RFC 8446 §6"
}

// deliver hands decrypted application data to the follower of the
// decrypted bytes, made at the first by Options.Inner (pkg/wire decides it
// again from the ALPN choice or the bytes).
func (c *Conn) deliver(h *direction, p []byte, t time.Time) {
	if c.inner == nil {
		inner := c.opt.Inner
		if c.joined != nil && c.opt.InnerJoined != nil {
			inner = c.opt.InnerJoined
		}
		c.inner = inner(c.alpn, c.sends(h), p, t, func() { c.noteDecrypted(t) })
	}
	if h.lost > 0 {
		// What the follower lost is the plaintext of the records lost:
		// their bytes less each one's header, nonce, tag and inner
		// content type (exact unless a record was padded).
		n := max(0, h.lost-int64(h.lostRecords)*h.overhead())
		if c.sends(h) {
			c.inner.ServerGap(n, t)
		} else {
			c.inner.ClientGap(n, t)
		}
		h.lost, h.lostRecords = 0, 0
	}
	if len(p) == 0 {
		return
	}
	exchange.FeedRecord(c.inner, c.sends(h), p, t) // p is one record's
}

// sends reports whether direction h carries what the TLS server sends: its
// side, unless the secrets showed the capture's roles the wrong way round
// (reversed: found by trying, trial.go).
func (c *Conn) sends(h *direction) bool { return h.server != c.reversed }

// describe says what the hellos show, e.g. `TLS 1.3,
// TLS_AES_128_GCM_SHA256, server name "x", ALPN h2`.
func (c *Conn) describe() string {
	var h tlsrec.Hello
	if c.sh != nil {
		h = *c.sh
	} else if c.ch != nil {
		h = *c.ch
	}
	if c.ch != nil {
		h.ServerName = c.ch.ServerName
	}
	h.ALPN = nil
	s := h.String()
	if c.sh == nil {
		s = "TLS ClientHello (" + s + ")"
	}
	switch {
	case c.alpn != "":
		s += ", ALPN " + tlsrec.ALPNText([]string{c.alpn})
	case c.ch != nil && len(c.ch.ALPN) > 0:
		s += ", ALPN offered " + tlsrec.ALPNText(c.ch.ALPN)
	}
	return s
}

func (c *Conn) noteDecrypted(t time.Time) {
	if c.noted {
		return
	}
	c.noted = true
	if c.joined != nil {
		c.noteJoined(t)
		return
	}
	src := ""
	if c.secrets != nil && c.secrets.Source != "" {
		src = " with keys from " + c.secrets.Source
	}
	suite := tlsrec.VersionName(c.sh.Version) + " " + suiteName(c.sh.CipherSuite)
	c.sink.Emit(&record.ConnNote{Conn: c.rec, Time: t, Kind: "tls-decrypted", Suite: suite,
		Message: c.describe() + ": decrypted" + src})
}

// noteUndecoded emits the connection's note that it stays encrypted, and why.
func (c *Conn) noteUndecoded(t time.Time, why string) {
	if c.noted {
		return
	}
	c.noted = true
	c.sink.Emit(&record.ConnNote{Conn: c.rec, Time: t, Kind: "tls", Message: c.describe() + ": encrypted, not decoded: " + why})
}

func (c *Conn) note(t time.Time, kind, msg string) {
	c.sink.Emit(&record.ConnNote{Conn: c.rec, Time: t, Kind: kind, Message: msg})
}

// giveUp says once why the connection cannot be decrypted (waited, when
// set, is how long it waited for keys), and stops decoding both directions.
func (c *Conn) giveUp(h *direction, t time.Time, waited string) {
	if c.gaveUp {
		return
	}
	c.gaveUp = true
	if !c.waitSince.IsZero() && c.waitSince.Before(t) {
		t = c.waitSince
	}
	switch {
	case c.helloErr != "":
		c.noted = true
		c.sink.Emit(&record.ConnNote{Conn: c.rec, Time: t, Kind: "tls", Message: c.helloErr + ": encrypted, not decoded"})
	case c.ch == nil && c.sh == nil:
		c.noted = true
		msg := "TLS records after the handshake, which the capture missed: encrypted, not decoded (a key log names a connection by the random of its ClientHello; start the capture before the client connects)" + c.trialSummary()
		if c.opt.Missed != "" {
			msg = c.opt.Missed
		}
		c.sink.Emit(&record.ConnNote{Conn: c.rec, Time: t, Kind: "tls", Message: msg})
	case c.ch == nil:
		c.noteUndecoded(t, "the capture lost the ClientHello, whose random names the connection in a key log")
	case c.suite == nil && c.sh == nil:
		c.noteUndecoded(t, "no ServerHello in the capture")
	case c.unsup:
	case c.opt.KeySource != "":
		c.noteUndecoded(t, "no key for client random "+c.random().String()+" from "+c.opt.KeySource)
	default:
		if !c.opt.Keys.Given() {
			c.noteUndecoded(t, "no key log (give one with --tls-keylog or SSLKEYLOGFILE, or capture one into the pcapng)")
			break
		}
		c.noteUndecoded(t, "no key for client random "+c.random().String())
		detail := fmt.Sprintf("client random %s is in none of the key logs", c.random())
		hint := "look for this client random in the client's SSLKEYLOGFILE or KeyLogWriter output"
		if absent := c.opt.Keys.Absent(); len(absent) > 0 {
			detail += "; key log " + strings.Join(absent, ", ") + " never appeared"
			hint = "check the key log's path: where the client's SSLKEYLOGFILE points"
		}
		if waited != "" {
			detail += "; " + waited
		}
		c.problem(h, -1, t, "no TLS key for this connection", detail, hint, false)
	}
	for _, d := range []*direction{c.cl, c.sv} {
		if d.live() {
			c.kill(d)
		}
	}
}

// helloProblem reports a hello that does not parse, when there are keys to
// decrypt with (without, the connection's note says it).
func (c *Conn) helloProblem(h *direction, off int64, t time.Time, err error) {
	if c.opt.Keys.Given() {
		c.problem(h, off, t, "TLS hello does not parse", err.Error(), "the connection cannot be decrypted", false)
	}
}

func (c *Conn) problem(h *direction, off int64, t time.Time, kind, detail, hint string, warning bool) {
	p := &record.Problem{Conn: c.rec, Direction: h.name(), Where: "stream", Offset: off, Time: t,
		Kind: kind, Detail: detail, Hint: hint, Warning: warning}
	if off < 0 {
		p.Where, p.Direction = "", ""
	}
	if c.opt.Locate != nil {
		c.opt.Locate(p)
	}
	c.sink.Emit(p)
}

// gap takes n bytes of a direction that the capture lost. When the record
// they fell into is known the framing is kept (its length says where the
// next record starts); otherwise the next record is looked for (resync).
func (c *Conn) gap(h *direction, n int64, t time.Time) {
	c.last = t
	if !h.live() || n <= 0 {
		h.off += n
		return
	}
	if c.inner == nil && !h.protected() && c.sh == nil {
		// The handshake itself was cut: nothing to decrypt with.
		h.off += int64(len(h.buf)) + n
		h.buf = nil
		h.release()
		c.giveUp(h, t, "")
		return
	}
	if c.tls13 && h.phase != phaseApp || !h.protected() {
		// Handshake messages cut by the loss cannot be read: the end
		// of the handshake is then found by the first record that
		// decrypts under the application keys (tryAppKeys).
		h.hs = hsReader{}
		h.hsLost = true
	}
	if h.skip > 0 {
		if n <= h.skip {
			h.skip -= n
			h.lost += n
			h.off += n
			return
		}
		n -= h.skip
		h.lost += h.skip
		h.off += h.skip
		h.skip = 0
		h.resync = true
	} else if len(h.buf) >= 5 && !h.resync {
		rest := 5 + int64(binary.BigEndian.Uint16(h.buf[3:5])) - int64(len(h.buf))
		h.lost += int64(len(h.buf))
		h.drop(len(h.buf))
		if h.cs != nil {
			h.cs.seq++ // the record cut by the gap
		} else if h.protected() {
			h.pendingSeq++ // counted once the keys are known
		}
		h.lostRecords++
		if n < rest {
			h.skip = rest - n
		} else if n > rest {
			h.resync = true
		}
	} else {
		h.lost += int64(len(h.buf))
		h.drop(len(h.buf))
		h.resync = true
	}
	h.lost += n
	h.off += n
}

// resync looks for the next record after a gap that took the framing with
// it: a plausible application data header whose record opens under one of
// the next sequence numbers. False while it needs more bytes. The search is
// bounded: maxResyncTries record openings and maxWait bytes scanned after
// each gap; past either, the direction is given up with a problem.
func (c *Conn) resync(h *direction, t time.Time) bool {
	if h.cs == nil {
		// No keys yet: nothing to check a candidate with.
		c.problem(h, h.off, t, "TLS record framing lost", "bytes were lost before the keys of this direction were known",
			"the rest of this direction cannot be decrypted", false)
		c.kill(h)
		return false
	}
	tries := min(int64(maxResyncTries), h.lost/22+2)
	for i := 0; i+5 <= len(h.buf); i++ {
		b := h.buf[i:]
		if b[0] != typeApplicationData || b[1] != 3 || b[2] != 3 {
			continue
		}
		n := int(binary.BigEndian.Uint16(b[3:5]))
		if n > maxCiphertext || n < 17 {
			continue
		}
		if len(b) < 5+n {
			h.resyncDrop(i)
			return c.resyncBounded(h, t)
		}
		for k := int64(0); k < tries && h.resyncOpens < maxResyncTries && h.resyncTotal < maxResyncTotal; k++ {
			h.resyncOpens++
			h.resyncTotal++
			if _, _, err := h.cs.open(h.plain[:0], b[:5], b[5:5+n], h.cs.seq+uint64(k)); err == nil {
				h.cs.seq += uint64(k)
				h.lostRecords += int(k)
				h.resyncDrop(i)
				h.resync, h.resyncOpens, h.resyncScanned = false, 0, 0
				return true
			}
		}
		if h.resyncOpens >= maxResyncTries || h.resyncTotal >= maxResyncTotal {
			break
		}
	}
	// Keep the last 4 bytes: they may start a header.
	h.resyncDrop(len(h.buf) - 4)
	return c.resyncBounded(h, t)
}

// resyncDrop forgets the first n bytes scanned while resynchronising.
func (h *direction) resyncDrop(n int) {
	if n <= 0 {
		return
	}
	h.lost += int64(n)
	h.resyncScanned += int64(n)
	h.drop(n)
}

// resyncBounded gives the direction up once the search after a gap used
// its budget; false either way (no record found yet).
func (c *Conn) resyncBounded(h *direction, t time.Time) bool {
	if h.resyncOpens >= maxResyncTries || h.resyncTotal >= maxResyncTotal || h.resyncScanned > maxWait {
		c.problem(h, h.off, t, "TLS record framing lost",
			fmt.Sprintf("no record that decrypts in %d bytes after the bytes lost (%d candidates tried)", h.resyncScanned, h.resyncOpens),
			"the rest of this direction cannot be decrypted", false)
		c.kill(h)
	}
	return false
}

func (c *Conn) close(h *direction, how exchange.Ending, t time.Time) {
	c.last = t
	if h.phase == phaseClosed {
		return
	}
	if h.live() && len(h.buf) > 0 {
		c.pump(h, t)
	}
	if h.live() && len(h.buf) > 0 && !c.gaveUp {
		if c.sh == nil || c.suite != nil && h.cs == nil && h.protected() {
			c.giveUp(h, t, "")
		} else if !h.resync && len(h.buf) > 0 {
			c.problem(h, h.off, t, "TLS record cut short",
				fmt.Sprintf("%d bytes of a record when the %s's stream ended", len(h.buf), h.name()), "", true)
		}
	}
	if h.live() {
		h.off += int64(len(h.buf))
		h.buf = nil
		h.release()
	}
	h.enter(phaseClosed)
	if c.inner == nil && !c.noted && (c.cl.phase == phaseClosed && c.sv.phase == phaseClosed) {
		switch {
		case c.trials != nil && !c.gaveUp:
			c.endTrial(h, t, fmt.Sprintf("none of the key log's %d TLS 1.3 connections that no captured handshake claimed opened the %d records tried with a sequence number below %d (after a direction's first, below their count from it)",
				c.trialCount, c.cl.trialMissed+c.sv.trialMissed, trialSeqs))
		case c.authFailed && c.cl.decrypted+c.sv.decrypted == 0:
			c.noteUndecoded(t, "the logged keys do not decrypt it")
		case c.ch != nil && c.sh != nil && !c.unsup && !c.gaveUp && c.cl.decrypted+c.sv.decrypted > 0:
			c.noteDecrypted(t) // a handshake without application data
		case c.ch != nil && c.sh != nil && !c.unsup && !c.gaveUp:
			c.giveUp(h, t, "")
		case !c.gaveUp:
			c.noteUndecoded(t, "the handshake did not complete in the capture")
		}
	}
	if c.inner != nil {
		if c.sends(h) {
			c.inner.CloseServer(how, t)
		} else {
			c.inner.CloseClient(how, t)
		}
	}
}

// hsReader joins handshake messages (RFC 8446 §4: type, 3-byte length,
// body) from the fragments the records carry.
type hsReader struct {
	hdr  [4]byte
	nhdr int
	need int // body bytes still to come
	body []byte
	keep bool
	err  string
}

// maxKeptMessage bounds a handshake message kept whole: hellos,
// EncryptedExtensions, Finished and KeyUpdate are far smaller; the others
// (certificates) are skipped as they pass.
const maxKeptMessage = 16 << 10

// feed takes handshake bytes; f gets each complete message's type and body
// (nil for a message not kept).
func (r *hsReader) feed(p []byte, f func(typ byte, body []byte)) {
	for len(p) > 0 {
		if r.nhdr < 4 {
			k := copy(r.hdr[r.nhdr:], p)
			r.nhdr += k
			p = p[k:]
			if r.nhdr < 4 {
				return
			}
			r.need = int(r.hdr[1])<<16 | int(r.hdr[2])<<8 | int(r.hdr[3])
			switch r.hdr[0] {
			case msgClientHello, msgServerHello, msgEncryptedExtensions, msgFinished, msgKeyUpdate:
				r.keep = r.need <= maxKeptMessage
				if !r.keep {
					r.err = fmt.Sprintf("handshake message of type %d is %d bytes long; not read", r.hdr[0], r.need)
				}
			default:
				r.keep = false
			}
			r.body = r.body[:0]
		}
		k := min(r.need, len(p))
		if r.keep {
			r.body = append(r.body, p[:k]...)
		}
		r.need -= k
		p = p[k:]
		if r.need == 0 {
			var body []byte
			if r.keep {
				body = bytes.Clone(r.body)
				if body == nil {
					body = []byte{}
				}
			}
			r.nhdr = 0
			f(r.hdr[0], body)
		}
	}
}
