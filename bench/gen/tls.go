package main

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"github.com/kwatch/kwatch/internal/testcert"
)

// useTLS is -tls: the HTTP/2 connection's bytes travel in TLS 1.3 records
// that crypto/tls makes (a real client and server over an in-memory pipe),
// and the client's key log is written beside the capture (FILE.keys.log).
// Keys and handshake differ from run to run (crypto/tls draws its own
// randomness); sizes and the decrypted bytes do not.
var useTLS bool

// tlsLayer encrypts what each side of the connection writes.
type tlsLayer struct {
	client, server *tls.Conn
	pipe           *memPipe
}

// memPipe joins two memEnds; it logs every write of either side, in
// order, for the capture.
type memPipe struct {
	mu   sync.Mutex
	cond *sync.Cond
	log  []piece
	live bool // the handshake is done: nothing is read any more
}

type piece struct {
	fromClient bool
	data       []byte
}

// memEnd is one side's raw connection under TLS.
type memEnd struct {
	p      *memPipe
	client bool
	in     bytes.Buffer // what the other side wrote, to read
	peer   *memEnd
}

func (e *memEnd) Write(b []byte) (int, error) {
	e.p.mu.Lock()
	defer e.p.mu.Unlock()
	e.p.log = append(e.p.log, piece{e.client, bytes.Clone(b)})
	if !e.p.live {
		e.peer.in.Write(b)
		e.p.cond.Broadcast()
	}
	return len(b), nil
}

func (e *memEnd) Read(b []byte) (int, error) {
	e.p.mu.Lock()
	defer e.p.mu.Unlock()
	for e.in.Len() == 0 {
		e.p.cond.Wait()
	}
	return e.in.Read(b)
}

func (e *memEnd) Close() error                     { return nil }
func (e *memEnd) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (e *memEnd) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (e *memEnd) SetDeadline(time.Time) error      { return nil }
func (e *memEnd) SetReadDeadline(time.Time) error  { return nil }
func (e *memEnd) SetWriteDeadline(time.Time) error { return nil }

// newTLSLayer runs a TLS 1.3 handshake offering ALPN h2, writes the
// client's key log to keyLogPath, and returns the layer with the
// handshake's bytes waiting in its log.
func newTLSLayer(keyLogPath string) (*tlsLayer, error) {
	cert, err := testcert.New(testcert.ECDSA, "kube-apiserver")
	if err != nil {
		return nil, err
	}
	kl, err := os.OpenFile(keyLogPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer kl.Close()
	p := &memPipe{}
	p.cond = sync.NewCond(&p.mu)
	ce, se := &memEnd{p: p, client: true}, &memEnd{p: p}
	ce.peer, se.peer = se, ce
	l := &tlsLayer{pipe: p,
		client: tls.Client(ce, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}, KeyLogWriter: kl}),
		server: tls.Server(se, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})}
	errc := make(chan error, 1)
	go func() { errc <- l.server.Handshake() }()
	if err := l.client.Handshake(); err != nil {
		return nil, err
	}
	if err := <-errc; err != nil {
		return nil, err
	}
	if l.client.ConnectionState().NegotiatedProtocol != "h2" {
		return nil, errors.New("ALPN did not choose h2")
	}
	p.mu.Lock()
	p.live = true
	p.mu.Unlock()
	return l, nil
}

// seal writes plaintext from one side and returns the records it became,
// after what was waiting in the log (the handshake, a session ticket).
func (l *tlsLayer) seal(fromClient bool, plain []byte) ([]piece, error) {
	c := l.server
	if fromClient {
		c = l.client
	}
	if _, err := c.Write(plain); err != nil {
		return nil, err
	}
	return l.take(), nil
}

// take returns the writes logged so far.
func (l *tlsLayer) take() []piece {
	l.pipe.mu.Lock()
	defer l.pipe.mu.Unlock()
	out := l.pipe.log
	l.pipe.log = nil
	return out
}
