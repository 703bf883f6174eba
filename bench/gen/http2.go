package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"strings"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2 is -http2: one connection, the watches as its streams.
var h2 bool

// maxDataFrame is the largest DATA frame payload: client-go advertises
// SETTINGS_MAX_FRAME_SIZE 16384, so the API server's frames are at most that.
const maxDataFrame = 16384

// runHTTP2 writes one HTTP/2 connection (prior knowledge) whose nstreams
// streams are watches, until the capture reaches target bytes: the same
// events as run writes, each flush as DATA frames of at most 16384 bytes on
// its stream, frames of different streams interleaved as the server
// writes them.
func runHTTP2(path string, target int64, nstreams int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w, err := newWriter(f)
	if err != nil {
		return err
	}
	c := &conn{client: net.IPv4(10, 0, 0, 1), server: net.IPv4(10, 0, 0, 2), cport: 40000, cseq: 1000, sseq: 5000, rv: 1000}
	var cb, sb, hb bytes.Buffer
	cf, sf := http2.NewFramer(&cb, nil), http2.NewFramer(&sb, nil)
	cenc, senc := hpack.NewEncoder(&hb), hpack.NewEncoder(&hb)
	block := func(enc *hpack.Encoder, kv ...string) []byte {
		hb.Reset()
		for i := 0; i < len(kv); i += 2 {
			_ = enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
		}
		return append([]byte(nil), hb.Bytes()...)
	}
	var tl *tlsLayer
	if useTLS {
		if tl, err = newTLSLayer(path + ".keys.log"); err != nil {
			return err
		}
		for _, pc := range tl.take() { // the handshake
			if err := w.send(c, pc.fromClient, pc.data); err != nil {
				return err
			}
		}
	}
	flushBuf := func(b *bytes.Buffer, fromClient bool) error {
		if b.Len() == 0 {
			return nil
		}
		defer b.Reset()
		if tl == nil {
			return w.send(c, fromClient, b.Bytes())
		}
		pieces, err := tl.seal(fromClient, b.Bytes())
		if err != nil {
			return err
		}
		for _, pc := range pieces {
			if err := w.send(c, pc.fromClient, pc.data); err != nil {
				return err
			}
		}
		return nil
	}
	cb.WriteString(http2.ClientPreface)
	_ = cf.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 4 << 20},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: maxDataFrame})
	_ = cf.WriteWindowUpdate(0, 1<<30)
	_ = sf.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 18}, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 100},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 18})
	enc := []string{}
	if gz {
		enc = []string{"content-encoding", "gzip"}
	}
	streams := make([]uint32, nstreams)
	for i := range streams {
		streams[i] = uint32(2*i + 1)
		_ = cf.WriteHeaders(http2.HeadersFrameParam{StreamID: streams[i], EndStream: true, EndHeaders: true,
			BlockFragment: block(cenc, ":method", "GET", ":scheme", "https", ":authority", "127.0.0.1:6443",
				":path", fmt.Sprintf("/api/v1/namespaces/ns-%d/configmaps?watch=1&allowWatchBookmarks=true", i),
				"accept", "application/json", "user-agent", "kubectl/v1.37.2")})
		_ = sf.WriteHeaders(http2.HeadersFrameParam{StreamID: streams[i], EndHeaders: true,
			BlockFragment: block(senc, append([]string{":status", "200", "content-type", "application/json", "cache-control", "no-cache, private"}, enc...)...)})
	}
	if err := flushBuf(&cb, true); err != nil {
		return err
	}
	if err := flushBuf(&sb, false); err != nil {
		return err
	}
	small := strings.Repeat("x", 600)
	big := strings.Repeat("y", 200<<10)
	if gz {
		small, big = text(w.rng, 600), text(w.rng, 200<<10)
	}
	var sent int64
	for n := 0; w.written < target; n++ {
		id := streams[n%nstreams]
		var data []byte
		switch {
		case n%97 == 0:
			data = flush(c.event("MODIFIED", big))
		case n%10 == 0:
			for j := 0; j < 3; j++ {
				data = append(data, c.event("ADDED", small)...)
			}
			data = flush(data)
		default:
			data = flush(c.event("MODIFIED", small))
		}
		for len(data) > 0 {
			k := min(len(data), maxDataFrame)
			_ = sf.WriteData(id, false, data[:k])
			data = data[k:]
		}
		sent += int64(sb.Len())
		if err := flushBuf(&sb, false); err != nil {
			return err
		}
		if sent > 1<<20 { // the client opens the windows again, as net/http does
			_ = cf.WriteWindowUpdate(0, uint32(sent))
			for _, s := range streams {
				_ = cf.WriteWindowUpdate(s, uint32(sent))
			}
			sent = 0
			if err := flushBuf(&cb, true); err != nil {
				return err
			}
		}
	}
	if err := w.flushHeld(); err != nil {
		return err
	}
	if !open {
		for _, s := range streams {
			_ = sf.WriteData(s, true, nil)
		}
		if err := flushBuf(&sb, false); err != nil {
			return err
		}
		if err := w.flushHeld(); err != nil {
			return err
		}
	}
	return w.f.Flush()
}
