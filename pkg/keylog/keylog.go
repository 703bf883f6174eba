// Package keylog holds TLS secrets read from key logs in the NSS key log
// format (RFC 9850, the SSLKEYLOGFILE format that curl, OpenSSL, NSS, Python's
// ssl module and Go's tls.Config.KeyLogWriter write), indexed by the client
// random of the connection they belong to.
//
// A key log reaches kwatch as a file (kwatch pcap --tls-keylog, or the
// SSLKEYLOGFILE environment variable) or inside a pcapng capture as
// Decryption Secrets Blocks (pcapng §4.7, secrets type 0x544c534b). Secrets
// are never printed: a Log only says how many it holds and which lines it
// could not read.
package keylog

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"sync"
)

// Labels of the key log lines kwatch uses (RFC 9850 §2, and the NSS key log
// documentation for the TLS 1.3 ones).
const (
	// LabelClientRandom carries a TLS 1.2 (or older) master secret, 48
	// bytes (RFC 5246 §8.1).
	LabelClientRandom = "CLIENT_RANDOM"
	// LabelClientHandshake and LabelServerHandshake carry TLS 1.3's
	// [sender]_handshake_traffic_secret (RFC 8446 §7.1).
	LabelClientHandshake = "CLIENT_HANDSHAKE_TRAFFIC_SECRET"
	LabelServerHandshake = "SERVER_HANDSHAKE_TRAFFIC_SECRET"
	// LabelClientTraffic0 and LabelServerTraffic0 carry TLS 1.3's first
	// [sender]_application_traffic_secret_0 (RFC 8446 §7.1).
	LabelClientTraffic0 = "CLIENT_TRAFFIC_SECRET_0"
	LabelServerTraffic0 = "SERVER_TRAFFIC_SECRET_0"
)

// allLabels are every label of RFC 9850 §2 (the NSS key log format), those
// kwatch does not use included.
var allLabels = []string{LabelClientRandom, "CLIENT_EARLY_TRAFFIC_SECRET", LabelClientHandshake, LabelServerHandshake,
	LabelClientTraffic0, LabelServerTraffic0, "EARLY_EXPORTER_SECRET", "EXPORTER_SECRET", "ECH_SECRET", "ECH_CONFIG"}

// LooksLikeKeyLog reports whether the start of a file reads as a key log
// (RFC 9850 §2): after comment lines ("#"), a line that begins with one of
// its labels and a space. It tells a key log given where a capture was
// expected.
func LooksLikeKeyLog(prefix []byte) bool {
	for bytes.HasPrefix(prefix, []byte("#")) {
		i := bytes.IndexByte(prefix, '\n')
		if i < 0 {
			return false
		}
		prefix = prefix[i+1:]
	}
	for _, l := range allLabels {
		if bytes.HasPrefix(prefix, []byte(l+" ")) {
			return true
		}
	}
	return false
}

// maxSecretBytes bounds one secret: the longest any TLS hash gives is 48
// bytes (SHA-384); 64 leaves room for SHA-512 and refuses a line that holds
// something else.
const maxSecretBytes = 64

// maxLineBytes bounds one key log line: a label, 64 hex digits of client
// random and up to 128 of secret fit in 300.
const maxLineBytes = 512

// DefaultMaxLines bounds the secrets one Log holds (one line each), so that
// a hostile or endless key log cannot take all memory: 256 Ki lines (the
// secrets of 64 Ki TLS 1.3 connections), about 100 MiB. Past it the
// secrets of the connections logged first are forgotten: a key log that
// grows for months keeps its newest.
const DefaultMaxLines = 1 << 18

// Random is a ClientHello's random (RFC 8446 §4.1.2), which names the
// connection a key log line is for.
type Random [32]byte

// String returns the random as 64 lower-case hex digits, as key logs write
// it, so that people can look for it in theirs.
func (r Random) String() string { return hex.EncodeToString(r[:]) }

// Secrets are the secrets a key log gave for one connection. A field is nil
// when no line gave it.
type Secrets struct {
	// Master is the TLS 1.2 master secret (48 bytes).
	Master []byte
	// ClientHandshake, ServerHandshake, ClientTraffic and ServerTraffic
	// are TLS 1.3 traffic secrets (32 or 48 bytes, the cipher suite's
	// hash length).
	ClientHandshake, ServerHandshake []byte
	ClientTraffic, ServerTraffic     []byte
	// Source names where the first line for this connection came from
	// (a file name, or "pcapng" for a Decryption Secrets Block).
	Source string
}

// LineError is a key log line kwatch could not read: where it is and why.
type LineError struct {
	Source string // file name, or "pcapng Decryption Secrets Block N"
	Line   int    // 1-based
	Reason string
}

// Error returns "FILE: line N: REASON".
func (e *LineError) Error() string {
	return fmt.Sprintf("%s: line %d: %s", e.Source, e.Line, e.Reason)
}

// Log is a set of secrets by client random. It is safe for use by several
// goroutines (a capture's reader adds secrets from the pcapng blocks it
// meets while the decoder looks them up). The zero value is not usable:
// create it with New.
type Log struct {
	mu      sync.Mutex
	secrets map[Random]*Secrets
	lines   int      // lines kept
	dropped int      // connections whose secrets were forgotten (DefaultMaxLines)
	order   []Random // connections in the order of their first line
	max     int      // lines held at most (DefaultMaxLines)
	errs    []*LineError
	nerrs   int
	files   []*watchedFile
	gen     int // counts the changes to secrets (and to joined)
	// joined holds the connections to be joined mid-way (AddJoined), by
	// their endpoints, the lower first.
	joined map[[2]netip.AddrPort]*Joined
	// processes holds what process lines (ProcessLine) said of
	// connections, by their client and server.
	processes map[[2]netip.AddrPort]*Processes
	// looked holds the randoms Lookup found secrets for (Trials leaves
	// them out); trialOpens counts what TakeTrialOpens took.
	looked     map[Random]bool
	trialOpens int
	// lookGen counts the changes to looked; trialsAt is the gen and
	// lookGen trials was made at, trialsAll the count Trials returns
	// with it: the key log is scanned once, not for each connection.
	lookGen   int
	trialsAt  [3]int
	trials    []Trial
	trialsAll int
	given     bool // a key log was given (a file, or text), secrets or not
	// stage holds what Stage was given for connections not looked up
	// yet (SetStaging); nil: Stage is Add.
	stage *staging
}

// watchedFile is a key log file that may still be appended to: re-read
// from where it was left when a lookup misses and the file grew.
type watchedFile struct {
	path string
	off  int64 // bytes read
	line int   // lines read
	part []byte
	once bool // not a regular file: read once, never again
	seen bool // opened at least once
}

// maxErrs bounds the line errors a Log keeps; the others are counted.
const maxErrs = 16

// New returns an empty Log.
func New() *Log { return &Log{secrets: map[Random]*Secrets{}, max: DefaultMaxLines} }

// SetMaxLines bounds the secret lines the Log holds to n (DefaultMaxLines
// when n <= 0); past it the secrets of the connections logged first are
// forgotten, as Stats counts.
func (l *Log) SetMaxLines(n int) {
	if n <= 0 {
		n = DefaultMaxLines
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.max = n
	for l.lines > l.max && len(l.order) > 1 {
		l.forgetOldest()
	}
}

// AddFile reads the key log file at path and remembers it: a later Lookup
// that finds no secrets re-reads the file from where it was left, when it
// grew (a client still writing it). It returns the error of opening or
// reading the file; lines that do not parse are kept as LineErrors.
//
// A file that does not exist yet (a client about to write it) is kept all
// the same and read once it appears; the error then wraps fs.ErrNotExist.
func (l *Log) AddFile(path string) error {
	w := &watchedFile{path: path}
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.readFile(w)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	l.given = true
	l.files = append(l.files, w)
	return err
}

// Given reports whether a key log was given at all (a file, or text such
// as a pcapng's Decryption Secrets Block), with secrets in it or not.
func (l *Log) Given() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.given
}

// maxUnsizedBytes bounds what is read from a key log that is not a regular
// file (a pipe, a device): it is read once, up to this many bytes.
const maxUnsizedBytes = 64 << 20

// readFile reads what was appended to w since the last read: of a regular
// file, up to its size when the read began; of anything else (a pipe, a
// device such as /dev/zero), once, up to maxUnsizedBytes. l.mu is held.
func (l *Log) readFile(w *watchedFile) error {
	if w.once {
		return nil
	}
	f, err := os.Open(w.path)
	if err != nil {
		return err
	}
	w.seen = true
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	limit := int64(maxUnsizedBytes)
	if st.Mode().IsRegular() {
		if st.Size() <= w.off {
			return nil
		}
		if _, err := f.Seek(w.off, io.SeekStart); err != nil {
			return err
		}
		limit = st.Size() - w.off
	} else {
		w.once = true
	}
	r := io.LimitReader(f, limit)
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		w.off += int64(n)
		data := buf[:n]
		for len(data) > 0 {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				if len(w.part)+len(data) > maxLineBytes {
					// An endless line: keep its start for the error.
					data = data[:max(0, maxLineBytes+1-len(w.part))]
				}
				w.part = append(w.part, data...)
				break
			}
			line := data[:i]
			if len(w.part) > 0 {
				line = append(w.part, line...)
				w.part = nil
			}
			w.line++
			l.addLine(line, w.path, w.line)
			data = data[i+1:]
		}
		if err == io.EOF {
			switch {
			case len(w.part) == 0:
			case w.once:
				// What a pipe left without its LF is its last line.
				w.line++
				l.addLine(w.part, w.path, w.line)
				w.part = nil
			case l.complete(w.part):
				// A last line without its LF: a file that ends so, or a
				// line being written. Taken if it reads as a whole line;
				// kept, to be taken again whole if the rest comes.
				l.addLine(w.part, w.path, w.line+1)
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Add reads key log text (lines separated by LF or CRLF, the last one may
// lack its LF) from source, e.g. a pcapng Decryption Secrets Block.
func (l *Log) Add(text []byte, source string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addText(text, source)
}

// addText is Add with l.mu held.
func (l *Log) addText(text []byte, source string) {
	l.given = true
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(nil, len(text)+1)
	n := 0
	for sc.Scan() {
		n++
		l.addLine(sc.Bytes(), source, n)
	}
}

// complete reports whether line, the end of a file without its LF, reads as
// a whole key log line: three fields, a 64-digit client random and a secret
// of a TLS hash's length (32 or 48 bytes; a master secret's 48).
func (l *Log) complete(line []byte) bool {
	f := bytes.Fields(line)
	if len(f) != 3 || len(f[1]) != 64 {
		return false
	}
	if string(f[0]) == LabelClientRandom {
		return len(f[2]) == 96
	}
	return len(f[2]) == 64 || len(f[2]) == 96
}

// lineError counts a line that could not be read, keeping the first
// maxErrs. l.mu is held.
func (l *Log) lineError(source string, line int, reason string) {
	l.nerrs++
	if len(l.errs) < maxErrs {
		l.errs = append(l.errs, &LineError{Source: source, Line: line, Reason: reason})
	}
}

// addLine reads one line. l.mu is held.
func (l *Log) addLine(line []byte, source string, n int) {
	line = bytes.TrimRight(line, "\r")
	t := bytes.TrimSpace(line)
	if bytes.HasPrefix(t, []byte(JoinedPrefix)) {
		// A connection joined mid-way, recorded by kwatch attach.
		j, err := parseJoined(t, source)
		if err != nil {
			l.lineError(source, n, err.Error())
			return
		}
		l.addJoined(j)
		return
	}
	if bytes.HasPrefix(t, []byte(ProcessPrefix)) {
		// The processes at a connection's ends, recorded by kwatch
		// attach.
		p, err := parseProcess(t)
		if err != nil {
			l.lineError(source, n, err.Error())
			return
		}
		l.addProcesses(p)
		return
	}
	if len(t) == 0 || t[0] == '#' {
		return
	}
	bad := func(reason string) { l.lineError(source, n, reason) }
	if len(line) > maxLineBytes {
		bad(fmt.Sprintf("longer than %d bytes", maxLineBytes))
		return
	}
	f := bytes.Fields(t)
	if len(f) != 3 {
		bad(fmt.Sprintf("%d fields, want 3 (LABEL CLIENT_RANDOM SECRET)", len(f)))
		return
	}
	var r Random
	if len(f[1]) != 64 {
		bad(fmt.Sprintf("client random of %d hex digits, want 64", len(f[1])))
		return
	}
	if _, err := hex.Decode(r[:], f[1]); err != nil {
		bad("client random is not hex")
		return
	}
	if len(f[2])%2 != 0 || len(f[2]) > 2*maxSecretBytes || len(f[2]) == 0 {
		bad(fmt.Sprintf("secret of %d hex digits, want an even number up to %d", len(f[2]), 2*maxSecretBytes))
		return
	}
	secret := make([]byte, len(f[2])/2)
	if _, err := hex.Decode(secret, f[2]); err != nil {
		bad("secret is not hex")
		return
	}
	var slot *[]byte
	s := l.secrets[r]
	if s == nil {
		s = &Secrets{Source: source}
	}
	switch string(f[0]) {
	case LabelClientRandom:
		slot = &s.Master
	case LabelClientHandshake:
		slot = &s.ClientHandshake
	case LabelServerHandshake:
		slot = &s.ServerHandshake
	case LabelClientTraffic0:
		slot = &s.ClientTraffic
	case LabelServerTraffic0:
		slot = &s.ServerTraffic
	default:
		// Labels kwatch does not use (EXPORTER_SECRET,
		// CLIENT_EARLY_TRAFFIC_SECRET, …) are valid lines.
		return
	}
	if string(f[0]) == LabelClientRandom && len(secret) != 48 {
		bad(fmt.Sprintf("CLIENT_RANDOM secret of %d bytes, want a 48-byte master secret", len(secret)))
		return
	}
	if *slot == nil {
		l.lines++
	}
	if _, ok := l.secrets[r]; !ok {
		l.order = append(l.order, r)
	}
	l.secrets[r] = s
	*slot = secret
	l.gen++
	for l.lines > l.max && len(l.order) > 1 {
		l.forgetOldest()
	}
}

// forgetOldest forgets the secrets of the connection logged first. l.mu is
// held.
func (l *Log) forgetOldest() {
	r := l.order[0]
	l.order = l.order[1:]
	if s := l.secrets[r]; s != nil {
		for _, b := range [][]byte{s.Master, s.ClientHandshake, s.ServerHandshake, s.ClientTraffic, s.ServerTraffic} {
			if b != nil {
				l.lines--
			}
		}
	}
	delete(l.secrets, r)
	l.dropped++
}

// Lookup returns a copy of the secrets for the connection whose
// ClientHello had random r, and whether there are any. When there are none, it first
// re-reads the key log files that grew since they were read.
func (l *Log) Lookup(r Random) (*Secrets, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.secrets[r]; ok {
		l.look(r)
		cp := *s // later lines change the Log's copy, under l.mu
		return &cp, true
	}
	for _, w := range l.files {
		_ = l.readFile(w) // a file gone since it was read: what was read stays
	}
	l.unstage(r)
	s, ok := l.secrets[r]
	if !ok {
		return nil, false
	}
	l.look(r)
	cp := *s
	return &cp, true
}

// look marks r as looked up, for Trials; the set is emptied past
// maxJoined randoms.
func (l *Log) look(r Random) {
	if l.looked[r] {
		return
	}
	if l.looked == nil || len(l.looked) >= maxJoined {
		l.looked = map[Random]bool{}
	}
	l.looked[r] = true
	l.lookGen++
}

// HasFiles reports whether the Log reads a key log file (which may still
// grow).
func (l *Log) HasFiles() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.files) > 0
}

// Absent returns the paths given to AddFile that could not be opened at
// any read so far (a key log that never appeared: a wrong path, or a
// client that never wrote it), in the order given; nil when there is none.
func (l *Log) Absent() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var paths []string
	for _, w := range l.files {
		if !w.seen {
			paths = append(paths, w.path)
		}
	}
	return paths
}

// Generation counts the changes to the secrets held: a caller waiting for
// secrets need look again only when it changed.
func (l *Log) Generation() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen
}

// Stats says how many connections the Log has secrets for, of how many
// connections it forgot the secrets because it was full (the oldest), and
// the lines that did not parse (up to 16; nerrs counts them all).
func (l *Log) Stats() (conns, dropped int, errs []*LineError, nerrs int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.secrets), l.dropped, append([]*LineError(nil), l.errs...), l.nerrs
}
