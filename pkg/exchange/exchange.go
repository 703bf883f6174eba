// Package exchange holds what every protocol follower of kwatch shares: the
// follower contract (the data, gap and close calls a connection's two byte
// streams are fed through), how a byte stream ended, how a request asks for
// a watch and what it gets first, how a watch body is set up for
// pkg/carrier and how its End record is filled, how a Status body is
// decoded, and how credentials are redacted. pkg/httpconn (HTTP/1.1),
// pkg/h2conn (HTTP/2) and pkg/tlsconn (TLS) build on it side by side;
// pkg/wire is the one place that knows them all.
package exchange

import (
	"fmt"
	"time"

	"github.com/kwatch/kwatch/pkg/carrier"
	"github.com/kwatch/kwatch/pkg/chunk"
	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/phrase"
	"github.com/kwatch/kwatch/pkg/record"
)

// Follower follows one TCP connection's two byte streams: bytes in any
// split, gaps (bytes the capture lost) and ends. pkg/httpconn, pkg/h2conn,
// pkg/tlsconn and pkg/wire implement it. t is when the bytes were seen.
type Follower interface {
	// ClientData feeds bytes the client sent.
	ClientData(p []byte, t time.Time)
	// ServerData feeds bytes the server sent.
	ServerData(p []byte, t time.Time)
	// ClientGap reports n bytes the client sent that were not captured.
	ClientGap(n int64, t time.Time)
	// ServerGap reports n bytes the server sent that were not captured.
	ServerGap(n int64, t time.Time)
	// CloseClient ends the client's byte stream.
	CloseClient(how Ending, t time.Time)
	// CloseServer ends the server's byte stream.
	CloseServer(how Ending, t time.Time)
}

// RecordFollower is a Follower that can be told where the records of the
// protocol that carries its bytes end (TLS records, RFC 8446 §5.1):
// ClientRecord and ServerRecord feed p as ClientData and ServerData do,
// and say that p is one record's whole plaintext, so that a record starts
// where p starts and ends where it ends. pkg/h2conn finds the frames of a
// connection joined mid-connection sooner with them; pkg/wire passes them
// on; pkg/tlsconn calls them.
type RecordFollower interface {
	Follower
	ClientRecord(p []byte, t time.Time)
	ServerRecord(p []byte, t time.Time)
}

// FeedRecord feeds p, one record's whole plaintext from the server (or
// from the client), to f: as a record when f is a RecordFollower, as
// bytes else.
func FeedRecord(f Follower, server bool, p []byte, t time.Time) {
	rf, ok := f.(RecordFollower)
	switch {
	case ok && server:
		rf.ServerRecord(p, t)
	case ok:
		rf.ClientRecord(p, t)
	case server:
		f.ServerData(p, t)
	default:
		f.ClientData(p, t)
	}
}

// Ending says why a direction's byte stream ended.
type Ending int

// How a connection's byte stream can end.
const (
	// EndFIN: the sender closed its side (TCP FIN), or a live read hit EOF.
	EndFIN Ending = iota
	// EndRST: the connection was reset.
	EndRST
	// EndCapture: the capture ended with the stream open.
	EndCapture
	// EndLocal: kwatch itself closed a live connection (Ctrl-C, or a
	// watch it stopped).
	EndLocal
	// EndDropped: kwatch stopped following a connection of a capture
	// that held more connections at once than it tracks. The body ends
	// "not decoded further", with that reason as its detail.
	EndDropped
	// EndClient: the client closed its side (TCP FIN) before the server
	// ended the response: the client gave the exchange up (a watch
	// stopped, curl killed). Like EndLocal, the body ends "closed by the
	// client"; EndLocal is the same close seen from inside kwatch.
	EndClient
	// EndClientRST: the client reset the connection (its RST came first):
	// like EndRST for how the body ended, but the client's doing, not a
	// server cutting its response short.
	EndClientRST
	// EndDetach: kwatch attach detached (Ctrl-C, --timeout) with the
	// stream open: EndCapture as kwatch attach says it, the connection
	// still open in its processes.
	EndDetach
)

// Detached is how a body kwatch attach stopped following when it detached
// ends (EndDetach): the connection was still open.
const Detached = "kwatch detached (the connection was still open)"

// KindMissing is the Problem kind of bytes a capture lost (ClientGap,
// ServerGap).
const KindMissing = "bytes missing from the capture"

// ClosedByKwatch is the End detail of a body kwatch itself closed
// (EndLocal).
const ClosedByKwatch = "kwatch closed the connection"

// MaxStatusBody bounds the bytes of a non-2xx body kept to show its Status
// (64 KiB).
const MaxStatusBody = 64 << 10

// DefaultMaxHeaderBytes bounds a request or response header section (and
// an HTTP/2 header list), in bytes (1 MiB, the default of Go's net/http
// server).
const DefaultMaxHeaderBytes = 1 << 20

// Limits bound and tune what every follower decodes. The zero value means
// the defaults.
type Limits struct {
	// MaxHeaderBytes bounds one header section (HTTP/2: one header
	// list's decoded fields), in bytes.
	MaxHeaderBytes int
	// MaxEventBytes bounds one watch event, in bytes.
	MaxEventBytes int64
	// MaxEventChunks bounds the carriers (chunks, DATA frames) listed for
	// one watch event (event.DefaultMaxSpans when 0); an event carried
	// by more still decodes, with a warning saying how many were not
	// listed.
	MaxEventChunks int
	// MaxInflatedBytes bounds what one gzip member (or a deflate body)
	// may inflate to, in bytes (inflate.DefaultMaxMemberBytes when 0): past
	// it the member is reported as a gzip bomb and skipped.
	MaxInflatedBytes int64
	// Chunk bounds the chunked decoder's lines.
	Chunk chunk.Limits
	// Decode tunes event decoding (e.g. showing Secret data).
	Decode event.DecodeOptions
	// Budget, if set, bounds the bytes held by the header sections and
	// watch events in progress (and events waiting for their carrier to
	// end) of every connection that shares it.
	Budget *event.Budget
	// Locate, if set, is called on every Problem before it is emitted, to
	// add where the bytes came from (capture file and packet number).
	Locate func(*record.Problem)
	// Omit, if set, says whether the filters leave out the exchange a
	// request opens (kwatch's --user-agent, --resource, -n: filter.Options
	// Omit). The follower asks it once the request is decoded and marks
	// the request (record.Request.Omitted): its response body is then not
	// framed into events, only its carriers counted; its records are
	// still emitted, for the filter's record stage to drop and count.
	Omit func(*record.Request) bool
}

// Events returns the bounds of a watch body's events (carrier.Options).
func (l Limits) Events() carrier.Options {
	return carrier.Options{MaxEventBytes: l.MaxEventBytes, MaxEventCarriers: l.MaxEventChunks,
		MaxInflatedBytes: l.MaxInflatedBytes, Decode: l.Decode, Budget: l.Budget}
}

// ConnCut is how the server cut short the watch bodies a byte stream's end
// (how) left unfinished: a reset (RST) or a close (FIN) from the server;
// nil for the other ends, which are the client's doing (EndClient,
// EndClientRST, EndLocal) or kwatch's (EndCapture, EndDetach, EndDropped).
func ConnCut(how Ending) *record.Cut {
	switch how {
	case EndRST:
		return &record.Cut{By: record.CutReset}
	case EndFIN:
		return &record.Cut{By: record.CutClosed}
	}
	return nil
}

// CutProblem returns the warning that the server cut short the watch whose
// End is e (e.Cut set), tied to its exchange; nil when e is not such an end:
// not a watch's response, or not cut. Its time is the end's; the follower
// locates it.
func CutProblem(e *record.End) *record.Problem {
	if e.Cut == nil || !e.Watch || e.Request {
		return nil
	}
	n := 0
	for _, c := range e.Events {
		n += c
	}
	return &record.Problem{Conn: e.Conn, Exchange: e.Exchange, Offset: -1, Time: e.Time, Warning: true,
		Kind:   record.KindCut,
		Detail: fmt.Sprintf("%s, after %s in %s", e.Cut, phrase.Count(n, "event", "events"), e.Duration.Round(time.Millisecond)),
		Hint:   "a watch ends at its last chunk or END_STREAM: the client gets an error and watches again; look in the API server's (or proxy's) log at this time"}
}
