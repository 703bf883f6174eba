package watchclient

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/kwatch/kwatch/pkg/httpconn"
	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/record"
)

// lockedSink serialises records from several connections (each read in its
// own goroutine by net/http) and from the list-watch loop into one sink,
// counts wire bytes, and passes decoded events to the watch in progress.
type lockedSink struct {
	mu       sync.Mutex
	sink     record.Sink
	bytes    int64
	conns    int
	current  *wireWatcher
	lastRead time.Time // when a tapped connection last read a byte
}

// Emit delivers r, taking the lock.
func (l *lockedSink) Emit(r record.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deliver(r)
	record.Flush(l.sink)
}

// flushLocked writes what the printers hold (record.Flusher): called
// after each read, write or close of a tapped connection has been decoded,
// so that output keeps up with the wire without a write per line. l.mu
// must be held.
func (l *lockedSink) flushLocked() { record.Flush(l.sink) }

// deliver prints r and hands events to the current watch; l.mu must be held.
func (l *lockedSink) deliver(r record.Record) {
	l.sink.Emit(r)
	if l.current == nil {
		return
	}
	switch v := r.(type) {
	case *record.Event:
		l.current.push(toWatchEvent(v))
	case *record.End:
		if !v.Request {
			l.current.mu.Lock()
			l.current.endHow, l.current.endWatch = v.How, v.Watch
			l.current.mu.Unlock()
		}
	}
}

// held is the sink given to the HTTP decoders, which run with l.mu held.
type held struct{ l *lockedSink }

// Emit delivers r; the caller holds the lock.
func (h held) Emit(r record.Record) { h.l.deliver(r) }

// tapConn is a connection whose bytes, in both directions, are also fed to
// kwatch's HTTP/1.1 decoder: what the server wrote is decoded exactly as a
// capture of it would be. For TLS it wraps the *tls.Conn, so it sees the
// decrypted bytes.
type tapConn struct {
	net.Conn
	sink   *lockedSink
	hc     *httpconn.Conn
	rec    *pcap.ConnWriter // nil unless recording
	mask   httpconn.CredentialMask
	closed bool
}

// Read reads from the connection and decodes what was read.
func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.sink.mu.Lock()
	defer c.sink.mu.Unlock()
	defer c.sink.flushLocked()
	now := time.Now()
	if n > 0 && !c.closed {
		c.sink.bytes += int64(n)
		c.sink.lastRead = now
		if c.rec != nil {
			c.rec.Server(p[:n], now)
		}
		// Decode synchronously: net/http reuses p after Read returns.
		c.hc.ServerData(p[:n], now)
	}
	if err != nil && !c.closed {
		how := httpconn.EndFIN
		switch {
		case errors.Is(err, syscall.ECONNRESET):
			how = httpconn.EndRST
		case errors.Is(err, net.ErrClosed):
			how = httpconn.EndLocal
		case !errors.Is(err, io.EOF):
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				how = httpconn.EndLocal
			}
		}
		c.closed = true
		c.hc.CloseServer(how, now)
		c.hc.CloseClient(how, now)
		if c.rec != nil {
			switch how {
			case httpconn.EndFIN:
				c.rec.FIN(false, now) // the server closed; the client's FIN follows in Close
			case httpconn.EndRST:
				c.rec.RST(false, now)
			default:
				c.rec.FIN(true, now) // kwatch closed it
			}
		}
	}
	return n, err
}

// Write decodes the request bytes, then writes them.
func (c *tapConn) Write(p []byte) (int, error) {
	c.sink.mu.Lock()
	now := time.Now()
	c.hc.ClientData(p, now)
	if c.rec != nil {
		// The recording is meant to be handed around: no token in it.
		c.rec.Client(c.mask.Mask(p), now)
	}
	c.sink.flushLocked()
	c.sink.mu.Unlock()
	return c.Conn.Write(p)
}

// Close closes the connection; a body still open is reported as ended by
// kwatch.
func (c *tapConn) Close() error {
	c.sink.mu.Lock()
	now := time.Now()
	if !c.closed {
		c.closed = true
		c.hc.CloseServer(httpconn.EndLocal, now)
		c.hc.CloseClient(httpconn.EndLocal, now)
	}
	if c.rec != nil {
		c.rec.FIN(true, now) // once; after a server FIN, this is kwatch's answer
	}
	c.sink.flushLocked()
	c.sink.mu.Unlock()
	return c.Conn.Close()
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
	sink *lockedSink
	opt  httpconn.Options
	rec  *pcap.Writer
}

func (t *tapper) wrap(raw net.Conn, shown net.Conn) net.Conn {
	t.sink.mu.Lock()
	t.sink.conns++
	rec := &record.Conn{ID: t.sink.conns, Client: addrPort(raw.LocalAddr()), Server: addrPort(raw.RemoteAddr())}
	t.sink.mu.Unlock()
	tc := &tapConn{Conn: shown, sink: t.sink, hc: httpconn.New(rec, held{t.sink}, t.opt)}
	if t.rec != nil {
		tc.rec = t.rec.Conn(rec.Client, rec.Server, time.Now())
	}
	return tc
}

// dialFunc dials a TCP connection.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// tlsDialer returns a DialTLSContext that dials with dial, completes a TLS
// handshake with cfg offering only HTTP/1.1 (ALPN "http/1.1", RFC 7301),
// and taps the decrypted bytes.
func (t *tapper) tlsDialer(dial dialFunc, base *tls.Config) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := base.Clone()
		if cfg.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			cfg.ServerName = host
		}
		// Offering h2 makes the API server choose it, and HTTP/2 has no
		// chunked coding to show.
		cfg.NextProtos = []string{"http/1.1"}
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return t.wrap(raw, tc), nil
	}
}

// plainDialer taps a plain TCP connection (kubectl proxy).
func (t *tapper) plainDialer(dial dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return t.wrap(raw, raw), nil
	}
}
