package watchclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/utils/clock"

	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/pcapwriter"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/wire"
)

// lockedSink serialises records from several connections (each decoded
// on its own goroutine) and from the list-watch loop into one sink, counts
// wire bytes, and passes decoded events to the watch in progress.
type lockedSink struct {
	mu    sync.Mutex
	sink  record.Sink
	bytes int64
	conns int
	ids   *atomic.Int64 // shared connection numbering (ConnectOptions.ConnIDs)
	// pending holds the watches asked for and not yet seen on the wire, by
	// URL path; bound the watches seen, by connection and exchange (an
	// HTTP/2 stream): the tapped records are handed to them (deliver).
	pending map[string]*wireWatcher
	bound   map[watchKey]*wireWatcher
	// detached: the run is over (Client.Close); nothing more reaches sink.
	detached bool
	// lastActive is when a tapped connection last read a byte or had
	// read bytes decoded (Unix nanoseconds on clock), for the watchdog: a
	// reader waiting for room in its queue is not a stalled server.
	lastActive atomic.Int64
	// watchAnswers counts the responses decoded that open a watch stream
	// (2xx to a watch request): the loop counts a watch as opened only
	// once its request returns, which may be after the response was shown.
	watchAnswers atomic.Int64
	// clock times lastActive and the watchdog (a fake one in tests);
	// records carry the wall-clock time.
	clock clock.WithTicker
	// watchdogTrace, set only by tests, is told when a watchdog found a
	// silence and is about to judge it under the lock ("judging"), and
	// what it then did ("reported" or "cleared").
	watchdogTrace func(string)

	// What the tapped connections have queued for decoding and what has
	// been decoded, counted in operations: drain waits for the second to
	// catch up with the first.
	qmu     sync.Mutex
	qcond   *sync.Cond // on qmu: decoded moved
	queued  int64
	decoded int64

	// open holds the tapped connections whose decoders have not yet
	// ended (on qmu), so that Client.Close can end them all and wait.
	open map[*tapConn]struct{}
}

func newLockedSink(sink record.Sink) *lockedSink {
	l := &lockedSink{sink: sink, open: map[*tapConn]struct{}{}, clock: clock.RealClock{}}
	l.qcond = sync.NewCond(&l.qmu)
	return l
}

// Emit delivers r, taking the lock.
func (l *lockedSink) Emit(r record.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deliver(r)
	l.flushLocked()
}

// flushLocked writes what the printers hold (record.Flusher): called
// after each batch of reads, writes or closes of a tapped connection has
// been decoded, so that output keeps up with the wire without a write per
// line. l.mu must be held.
func (l *lockedSink) flushLocked() {
	if !l.detached {
		record.Flush(l.sink)
	}
}

// watchKey names an exchange: a connection and its exchange number (the
// stream identifier on HTTP/2).
type watchKey struct {
	conn     *record.Conn
	exchange int
}

// expect registers w as the watch of the request for path about to be sent;
// l.mu must be held.
func (l *lockedSink) expect(path string, w *wireWatcher) {
	if l.pending == nil {
		l.pending, l.bound = map[string]*wireWatcher{}, map[watchKey]*wireWatcher{}
	}
	l.pending[path] = w
}

// deliver prints r and hands events to the watch they belong to: the one
// that asked for their exchange's request; l.mu must be held.
func (l *lockedSink) deliver(r record.Record) {
	if l.detached {
		return
	}
	l.sink.Emit(r)
	if v, ok := r.(*record.Response); ok && v.Watch && v.StatusCode/100 == 2 {
		l.watchAnswers.Add(1)
	}
	switch v := r.(type) {
	case *record.Request:
		path, _, _ := strings.Cut(v.Target, "?")
		if w := l.pending[path]; w != nil {
			delete(l.pending, path)
			l.bound[watchKey{v.Conn, v.Exchange}] = w
		}
	case *record.Event:
		// Events of an exchange nobody here asked for answer nothing.
		if w := l.bound[watchKey{v.Conn, v.Exchange}]; w != nil {
			w.push(toWatchEvent(v))
		}
	case *record.End:
		k := watchKey{v.Conn, v.Exchange}
		if w := l.bound[k]; w != nil && !v.Request {
			delete(l.bound, k)
			w.mu.Lock()
			w.endHow, w.endWatch = v.How, v.Watch
			w.mu.Unlock()
			w.endOnce.Do(func() { close(w.ended) })
		}
	}
}

// emitWhen delivers the record made by mk, unless one of the channels is
// closed by the time the lock is held or mk, called under the lock,
// returns nil (what it was about no longer holds); it reports whether a
// record was delivered.
func (l *lockedSink) emitWhen(mk func() record.Record, chans ...<-chan struct{}) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range chans {
		select {
		case <-c:
			return false
		default:
		}
	}
	r := mk()
	if r == nil {
		return false
	}
	l.deliver(r)
	l.flushLocked()
	return true
}

// drain returns once everything the tapped connections had queued for
// decoding when it was called has been decoded and delivered: the
// list-watch loop calls it when a watch body has been read to its end,
// before it takes the resume resourceVersion.
func (l *lockedSink) drain() {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	for want := l.queued; l.decoded < want; {
		l.qcond.Wait()
	}
}

// held is the sink given to the HTTP decoders, which run with l.mu held.
type held struct{ l *lockedSink }

// Emit delivers r; the caller holds the lock.
func (h held) Emit(r record.Record) { h.l.deliver(r) }

// tapQueue is how many reads, writes and closes a tapped connection may
// queue for its decoder before the next one waits: with reads of up to
// watchReadBuffer bytes, at most 1 MiB per connection.
const tapQueue = 16

// tapKind says what a tapped connection did.
type tapKind uint8

const (
	tapRead    tapKind = iota // the server's bytes were read
	tapWrite                  // the client's bytes were written
	tapReadEnd                // reading ended (EOF, reset, timeout)
	tapClose                  // kwatch closed the connection; the last operation
)

// tapOp is one thing a tapped connection did, queued for its decoder in
// the order it happened.
type tapOp struct {
	kind tapKind
	data []byte // tapRead, tapWrite: a copy of the bytes, from tapBuffers
	how  exchange.Ending
	at   time.Time
}

// tapBuffers recycles the copies of read and written bytes.
var tapBuffers = sync.Pool{New: func() any { return new([]byte) }}

// tapConn is a connection whose bytes, in both directions, are also fed to
// kwatch's HTTP/1.1 decoder: what the server wrote is decoded exactly as a
// capture of it would be. For TLS it wraps the *tls.Conn, so it sees the
// decrypted bytes. The decoding runs on a goroutine of its own, in the
// order the bytes were read and written, so that it does not hold up
// net/http's reading (on a busy watch, reading and decoding then use two
// cores).
type tapConn struct {
	net.Conn
	sink *lockedSink
	hc   *wire.Conn
	rec  *pcapwriter.ConnWriter // nil unless recording
	// mask hides the client's credentials from the recording: HTTP/1.1's
	// or HTTP/2's (HPACK).
	mask     wire.CredentialMask
	maskLost bool // the mask broke: client bytes recorded as zeros

	qmu    sync.Mutex // orders sends to ops; guards done
	ops    chan tapOp
	done   bool // tapClose has been queued: nothing more is
	closed bool // the decoder has ended both sides (decoder only)
	// decoded is closed when the decoder has decoded the connection's
	// last operation (its close) and delivered every record of it.
	decoded chan struct{}
}

func newTapConn(shown net.Conn, sink *lockedSink, hc *wire.Conn, h2 bool) *tapConn {
	c := &tapConn{Conn: shown, sink: sink, hc: hc, ops: make(chan tapOp, tapQueue), decoded: make(chan struct{}),
		mask: wire.NewCredentialMask(h2)}
	sink.qmu.Lock()
	sink.open[c] = struct{}{}
	sink.qmu.Unlock()
	go c.decode()
	return c
}

// closeAndWait closes the connection (if net/http has not already) and
// returns once everything it read, and how it ended, has been decoded and
// delivered: what kwatch prints of an exchange is then complete, whatever
// net/http's own goroutines are still doing.
func (c *tapConn) closeAndWait() {
	_ = c.Close()
	<-c.decoded
}

// closeTapped ends every tapped connection still open and waits for their
// decoders (Client.Close).
func (l *lockedSink) closeTapped() {
	l.qmu.Lock()
	conns := make([]*tapConn, 0, len(l.open))
	for c := range l.open {
		conns = append(conns, c)
	}
	l.qmu.Unlock()
	for _, c := range conns {
		c.closeAndWait()
	}
}

// queue hands op to the decoder; it waits while the queue is full.
func (c *tapConn) queue(op tapOp, p []byte) {
	if p != nil {
		b := tapBuffers.Get().(*[]byte)
		*b = append((*b)[:0], p...)
		op.data = *b
	}
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if c.done { // closed: nothing after tapClose is decoded
		if op.data != nil {
			tapBuffers.Put(&op.data)
		}
		return
	}
	c.done = op.kind == tapClose
	c.sink.qmu.Lock()
	c.sink.queued++
	c.sink.qmu.Unlock()
	c.ops <- op
}

// Read reads from the connection and queues what was read for decoding.
func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	now := time.Now()
	if n > 0 {
		c.sink.lastActive.Store(c.sink.clock.Now().UnixNano())
		c.queue(tapOp{kind: tapRead, at: now}, p[:n]) // a copy: net/http reuses p
	}
	if err != nil {
		how := exchange.EndFIN
		switch {
		case errors.Is(err, syscall.ECONNRESET):
			how = exchange.EndRST
		case errors.Is(err, net.ErrClosed):
			how = exchange.EndLocal
		case !errors.Is(err, io.EOF):
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				how = exchange.EndLocal
			}
		}
		c.queue(tapOp{kind: tapReadEnd, how: how, at: now}, nil)
	}
	return n, err
}

// Write queues the request bytes for decoding, then writes them.
func (c *tapConn) Write(p []byte) (int, error) {
	c.queue(tapOp{kind: tapWrite, at: time.Now()}, p)
	return c.Conn.Write(p)
}

// Close closes the connection; a body still open is reported as ended by
// kwatch.
func (c *tapConn) Close() error {
	c.queue(tapOp{kind: tapClose, at: time.Now()}, nil)
	return c.Conn.Close()
}

// decode decodes the queued operations until tapClose, taking the sink's
// lock once for each batch that is waiting (up to tapQueue operations).
func (c *tapConn) decode() {
	for {
		op := <-c.ops
		c.sink.mu.Lock()
		n := 0
		last, read := false, false
		for {
			read = read || op.kind == tapRead
			last = c.apply(op)
			n++
			// At most a queue's worth at a time: the loop and the
			// watchdog print under the same lock.
			if last || len(c.ops) == 0 || n == tapQueue {
				break
			}
			op = <-c.ops
		}
		c.sink.flushLocked()
		// Under the lock: a watchdog waiting for it (while printing was
		// held up by a full pipe) sees this batch's activity.
		if read {
			c.sink.lastActive.Store(c.sink.clock.Now().UnixNano())
		}
		c.sink.mu.Unlock()
		c.sink.qmu.Lock()
		c.sink.decoded += int64(n)
		if last {
			delete(c.sink.open, c)
		}
		c.sink.qcond.Broadcast()
		c.sink.qmu.Unlock()
		if last {
			close(c.decoded)
			return
		}
	}
}

// apply decodes one operation, with the sink's lock held, and reports
// whether it was the last.
func (c *tapConn) apply(op tapOp) bool {
	defer func() {
		if op.data != nil {
			b := op.data
			tapBuffers.Put(&b)
		}
	}()
	switch op.kind {
	case tapRead:
		if c.closed {
			break
		}
		c.sink.bytes += int64(len(op.data))
		if c.rec != nil {
			c.rec.Server(op.data, op.at)
		}
		c.hc.ServerData(op.data, op.at)
	case tapWrite:
		c.hc.ClientData(op.data, op.at)
		if c.rec != nil {
			// The recording is meant to be handed around: no token in it.
			out := c.mask.Mask(op.data)
			if c.mask.Broken() {
				// The mask lost track of HPACK: rather than risk a
				// credential, the client's bytes are recorded as zeros
				// from here (the recording's client side stops
				// decoding; the server's is whole).
				if !c.maskLost {
					c.maskLost = true
					c.sink.deliver(&record.Problem{Time: op.at, Offset: -1, Kind: "recording masked whole", // l.mu is held
						Detail: "the credential mask lost track of the client's HPACK header blocks; the client's bytes are recorded as zeros from here"})
				}
				out = make([]byte, len(op.data))
			}
			c.rec.Client(out, op.at)
		}
	case tapReadEnd:
		if c.closed {
			break
		}
		c.closed = true
		c.hc.CloseServer(op.how, op.at)
		c.hc.CloseClient(op.how, op.at)
		if c.rec != nil {
			switch op.how {
			case exchange.EndFIN:
				c.rec.FIN(false, op.at) // the server closed; the client's FIN follows in Close
			case exchange.EndRST:
				c.rec.RST(false, op.at)
			default:
				c.rec.FIN(true, op.at) // kwatch closed it
			}
		}
	case tapClose:
		if !c.closed {
			c.closed = true
			c.hc.CloseServer(exchange.EndLocal, op.at)
			c.hc.CloseClient(exchange.EndLocal, op.at)
		}
		if c.rec != nil {
			c.rec.FIN(true, op.at) // once; after a server FIN, this is kwatch's answer
		}
		return true
	}
	return false
}

func addrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort()
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}

// tapper wraps dialled connections in tapConns.
type tapper struct {
	sink   *lockedSink
	board  *wire.Board // makes the followers of every tapped connection
	rec    *pcapwriter.Writer
	http2  bool      // plain connections speak HTTP/2 (kwatch stream --http2)
	keyLog io.Writer // receives TLS keys (ConnectOptions.KeyLog)
}

// wrap taps a connection; h2 says it speaks HTTP/2 (for the recording's
// credential mask). recorded, when set, is raw's recording already (the
// TLS bytes as they travelled): the decrypted bytes are then not recorded.
func (t *tapper) wrap(raw net.Conn, shown net.Conn, h2 bool, recorded *pcapwriter.ConnWriter) net.Conn {
	t.sink.mu.Lock()
	t.sink.conns++
	id := t.sink.conns
	if t.sink.ids != nil {
		id = int(t.sink.ids.Add(1))
	}
	rec := &record.Conn{ID: id, Client: addrPort(raw.LocalAddr()), Server: addrPort(raw.RemoteAddr())}
	t.sink.mu.Unlock()
	tc := newTapConn(shown, t.sink, t.board.Conn(rec, held{t.sink}), h2)
	if t.rec != nil && recorded == nil {
		tc.rec = t.rec.Conn(rec.Client, rec.Server, time.Now())
	}
	return tc
}

// keyLogWriter writes each key log line to every writer. It never fails:
// crypto/tls ends the handshake when its KeyLogWriter fails, and a full
// disk under a recording must not stop the watch (the recording's error is
// reported when it is closed).
type keyLogWriter []io.Writer

func (k keyLogWriter) Write(p []byte) (int, error) {
	for _, w := range k {
		_, _ = w.Write(p)
	}
	return len(p), nil
}

// rawRecorder records a TLS connection's bytes as they travel, below TLS
// (kwatch stream --record FILE.pcapng): the handshake, every record, and
// how each side ended. Until release, what it records is held back, so
// that the keys crypto/tls logs during the handshake are in the file
// before the records they decrypt: Wireshark and TShark look a
// connection's keys up when they read its ServerHello.
type rawRecorder struct {
	net.Conn
	rec *pcapwriter.ConnWriter

	mu   sync.Mutex
	held []rawOp // nil once released
	live bool
}

// rawOp is one thing held back: bytes sent or received, or an end.
type rawOp struct {
	client bool
	data   []byte
	end    int // 0 data, 1 FIN, 2 RST
	at     time.Time
}

func (r *rawRecorder) do(op rawOp) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.live {
		if op.data != nil {
			op.data = bytes.Clone(op.data)
		}
		r.held = append(r.held, op)
		return
	}
	r.write(op)
}

func (r *rawRecorder) write(op rawOp) {
	switch op.end {
	case 1:
		r.rec.FIN(op.client, op.at)
	case 2:
		r.rec.RST(op.client, op.at)
	default:
		if op.client {
			r.rec.Client(op.data, op.at)
		} else {
			r.rec.Server(op.data, op.at)
		}
	}
}

// release writes what was held back and records from here on as it comes.
func (r *rawRecorder) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, op := range r.held {
		r.write(op)
	}
	r.held, r.live = nil, true
}

func (r *rawRecorder) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	now := time.Now()
	if n > 0 {
		r.do(rawOp{data: p[:n], at: now})
	}
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		r.do(rawOp{end: 1, at: now})
	case errors.Is(err, syscall.ECONNRESET):
		r.do(rawOp{end: 2, at: now})
	}
	return n, err
}

func (r *rawRecorder) Write(p []byte) (int, error) {
	r.do(rawOp{client: true, data: p, at: time.Now()})
	return r.Conn.Write(p)
}

func (r *rawRecorder) Close() error {
	r.do(rawOp{client: true, end: 1, at: time.Now()})
	r.release() // a handshake that failed: its bytes all the same
	return r.Conn.Close()
}

// dialFunc dials a TCP connection.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// tlsDialer returns a DialTLSContext that dials with dial, completes a TLS
// handshake with cfg offering only proto by ALPN (RFC 7301): "http/1.1",
// or "h2" (then the server must choose it), and taps the decrypted bytes.
func (t *tapper) tlsDialer(dial dialFunc, base *tls.Config, proto string) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := base.Clone()
		var recorded *pcapwriter.ConnWriter
		var rr *rawRecorder
		conn := raw
		var keyLogs []io.Writer
		if t.keyLog != nil {
			keyLogs = append(keyLogs, t.keyLog)
		}
		if t.rec != nil && t.rec.PCAPNG() {
			// The real TLS bytes, and the keys that decrypt them in the
			// same file, ahead of the records they decrypt.
			recorded = t.rec.Conn(addrPort(raw.LocalAddr()), addrPort(raw.RemoteAddr()), time.Now())
			rr = &rawRecorder{Conn: raw, rec: recorded}
			conn = rr
			keyLogs = append(keyLogs, t.rec)
		}
		if len(keyLogs) > 0 {
			cfg.KeyLogWriter = keyLogWriter(keyLogs)
		}
		if cfg.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			cfg.ServerName = host
		}
		// Offering h2 makes the API server choose it: offer only the
		// protocol asked for.
		cfg.NextProtos = []string{proto}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		if rr != nil {
			rr.release() // every key is logged by now
		}
		if got := tc.ConnectionState().NegotiatedProtocol; proto == "h2" && got != "h2" {
			conn.Close()
			return nil, fmt.Errorf("%s did not agree to HTTP/2 (ALPN h2; it chose %q)", addr, got)
		}
		if err := ctx.Err(); err != nil {
			// The request was given up while dialling: net/http would
			// close this connection unused.
			conn.Close()
			return nil, err
		}
		return t.wrap(raw, tc, proto == "h2", recorded), nil
	}
}

// plainDialer taps a plain TCP connection (kubectl proxy).
func (t *tapper) plainDialer(dial dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			// The request was given up while dialling: net/http would
			// close this connection unused.
			raw.Close()
			return nil, err
		}
		return t.wrap(raw, raw, t.http2, nil), nil
	}
}
