package keylog

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"net/netip"
	"time"
)

// Staging holds secrets for connections no lookup has asked for yet. A key
// source that sees every handshake of some processes (kwatch attach's
// uprobe on crypto/tls) gives secrets of connections the capture may never
// hold: a port it does not capture, a handshake with a peer the capture
// filter left out, or a process that calls crypto/tls's writeKeyLog with
// made-up client randoms to fill kwatch's memory. Their lines wait here,
// bounded by lines and by time, and enter the Log (and Admitted, e.g. a
// recording's Decryption Secrets Block) only when a lookup asks for their
// client random: the ClientHello of a connection the capture holds.
// Lines whose random a lookup already asked for, or the Log already holds
// secrets for, enter at once.
type StageOptions struct {
	// MaxLines bounds the lines waiting (DefaultStageLines when 0); past
	// it the oldest are forgotten, and counted (StageStats).
	MaxLines int
	// Window is how long a line waits for a lookup of its random, and
	// how long a lookup that found nothing waits for lines of its random
	// (DefaultStageWindow when 0).
	Window time.Duration
	// Admitted, when set, is called with each line as it enters the Log
	// from Stage, without its line ending, and with the line of each
	// joined state as LookupJoined first finds it (Joined.Line, with its
	// LF). It is called with the Log's lock held: it must not call the
	// Log.
	Admitted func(line []byte)
}

// Defaults of StageOptions.
const (
	// DefaultStageLines is 16 Ki lines: the secrets of 4096 TLS 1.3
	// handshakes (4 lines each for one side), about 2 MiB.
	DefaultStageLines = 1 << 14
	// DefaultStageWindow is 30 s: a handshake's packets reach the
	// decoder within milliseconds of its secrets, and a connection held
	// up behind a lost segment within the capture's gap timeout (2 s).
	DefaultStageWindow = 30 * time.Second
)

// maxWanted bounds the randoms of lookups that found nothing remembered
// for Stage; past it the oldest are forgotten.
const maxWanted = 1 << 16

// staging is a Log's StageOptions and what waits.
type staging struct {
	opt StageOptions
	// lines waits by random, order lists the randoms as their first
	// line came; n counts the lines.
	lines map[Random]*staged
	order []Random
	n     int
	// wanted holds the randoms lookups missed, with when, in order.
	wanted      map[Random]time.Time
	wantedOrder []Random
	// admitted counts the lines that entered the Log from Stage;
	// forgotten those that waited in vain.
	admitted, forgotten int
	// told holds the joined connections (joinKey) whose state Admitted
	// was given; AddJoined takes a connection out when its state changes.
	told map[[2]netip.AddrPort]bool
	// now is the clock (tests set another).
	now func() time.Time
}

// staged is the lines of one random, with their sources and when the
// first came.
type staged struct {
	at      time.Time
	lines   [][]byte
	sources []string
}

// SetStaging makes the Log hold lines given to Stage as opt says. Call it
// before Stage.
func (l *Log) SetStaging(opt StageOptions) {
	if opt.MaxLines <= 0 {
		opt.MaxLines = DefaultStageLines
	}
	if opt.Window <= 0 {
		opt.Window = DefaultStageWindow
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stage = &staging{opt: opt, lines: map[Random]*staged{}, wanted: map[Random]time.Time{}, told: map[[2]netip.AddrPort]bool{}, now: time.Now}
}

// Stage adds key log text (lines as Add reads them) from source, a key
// source that may give secrets of connections never captured: each line
// waits for a lookup of its random (see StageOptions), or enters the Log at
// once when a lookup asked for that random within the window, or the Log
// holds secrets for it already. Without SetStaging it is Add. Lines that
// do not read as key log lines are counted as Add counts them, when they
// would enter.
func (l *Log) Stage(text []byte, source string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.stage
	if st == nil {
		l.addText(text, source)
		return
	}
	l.given = true
	now := st.now()
	st.expire(now)
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(nil, len(text)+1)
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		r, ok := lineRandom(line)
		if !ok {
			l.addLine(line, source, n) // counted as a bad line, or a comment
			continue
		}
		_, have := l.secrets[r]
		if _, asked := st.wanted[r]; asked || have {
			l.admit(line, source, n)
			continue
		}
		s := st.lines[r]
		if s == nil {
			s = &staged{at: now}
			st.lines[r] = s
			st.order = append(st.order, r)
		}
		s.lines = append(s.lines, bytes.Clone(line))
		s.sources = append(s.sources, source)
		st.n++
		for st.n > st.opt.MaxLines && len(st.order) > 0 {
			st.drop(st.order[0])
		}
	}
}

// admit adds line to the Log and tells Admitted. l.mu is held.
func (l *Log) admit(line []byte, source string, n int) {
	gen := l.gen
	l.addLine(line, source, n)
	if l.gen != gen {
		l.stage.admitted++
		if l.stage.opt.Admitted != nil {
			l.stage.opt.Admitted(line)
		}
	}
}

// staged lines of r enter the Log, when r was staged; a random with no
// lines is remembered as wanted. l.mu is held.
func (l *Log) unstage(r Random) {
	st := l.stage
	if st == nil {
		return
	}
	now := st.now()
	st.expire(now)
	if s, ok := st.lines[r]; ok {
		st.remove(r)
		for i, line := range s.lines {
			l.admit(line, s.sources[i], i+1)
		}
		return
	}
	if _, ok := st.wanted[r]; !ok {
		st.wanted[r] = now
		st.wantedOrder = append(st.wantedOrder, r)
		for len(st.wantedOrder) > maxWanted {
			delete(st.wanted, st.wantedOrder[0])
			st.wantedOrder = st.wantedOrder[1:]
		}
	}
}

// expire forgets the lines and the wanted randoms older than the window.
func (st *staging) expire(now time.Time) {
	for len(st.order) > 0 {
		s, ok := st.lines[st.order[0]]
		if ok && now.Sub(s.at) < st.opt.Window {
			break
		}
		if ok {
			st.drop(st.order[0])
		} else {
			st.order = st.order[1:] // taken by a lookup
		}
	}
	for len(st.wantedOrder) > 0 {
		r := st.wantedOrder[0]
		if at, ok := st.wanted[r]; ok && now.Sub(at) < st.opt.Window {
			break
		}
		delete(st.wanted, r)
		st.wantedOrder = st.wantedOrder[1:]
	}
}

// drop forgets the lines of r, counted as forgotten.
func (st *staging) drop(r Random) {
	if s, ok := st.lines[r]; ok {
		st.forgotten += len(s.lines)
	}
	st.remove(r)
	if len(st.order) > 0 && st.order[0] == r {
		st.order = st.order[1:]
	}
}

// remove takes the lines of r out (order is cleaned up as it is walked).
func (st *staging) remove(r Random) {
	if s, ok := st.lines[r]; ok {
		st.n -= len(s.lines)
		delete(st.lines, r)
	}
}

// lineRandom returns the client random of a key log line: its second
// field, 64 hex digits.
func lineRandom(line []byte) (Random, bool) {
	var r Random
	f := bytes.Fields(line)
	if len(f) != 3 || len(f[1]) != 2*len(r) || f[0][0] == '#' {
		return r, false
	}
	if _, err := hex.Decode(r[:], f[1]); err != nil {
		return r, false
	}
	return r, true
}

// StageStats says how many lines wait now (for connections no lookup asked
// for), how many entered the Log from Stage, and how many were forgotten
// after waiting in vain (past the window, or past MaxLines). All 0 without
// SetStaging.
func (l *Log) StageStats() (waiting, admitted, forgotten int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stage == nil {
		return 0, 0, 0
	}
	l.stage.expire(l.stage.now())
	return l.stage.n, l.stage.admitted, l.stage.forgotten
}

// tellJoined gives Admitted the line of joined state j the first time a
// lookup finds it (after each change AddJoined made). l.mu is held.
func (l *Log) tellJoined(j *Joined) {
	st := l.stage
	if st == nil || st.opt.Admitted == nil {
		return
	}
	k := joinKey(j.Client, j.Server)
	if st.told[k] {
		return
	}
	if len(st.told) >= maxJoined {
		clear(st.told)
	}
	st.told[k] = true
	st.opt.Admitted(j.Line())
}
