package keylog

// Which key log file a capture is decrypted with, and what becomes of one
// that cannot be read: kwatch pcap's --tls-keylog, else SSLKEYLOGFILE; the
// keys inside a pcapng (Decryption Secrets Blocks) are added by the reader
// of the capture whatever is chosen here.

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Origin says who named a key log file, which decides what becomes of one
// that cannot be read.
type Origin int

const (
	// FromFlag: the --tls-keylog flag named it. A file that cannot be read
	// ends the run, except one that does not exist yet while the capture
	// is live.
	FromFlag Origin = iota + 1
	// FromEnv: the SSLKEYLOGFILE environment variable named it, perhaps
	// set for other programs. A file that cannot be read is only warned
	// about: TLS is then decrypted with the keys inside the capture alone.
	FromEnv
)

// Choice is the key log file to read and who named it.
type Choice struct {
	// Path is the file; "" for none.
	Path   string
	Origin Origin
}

// Choose returns the key log to read: flag (--tls-keylog) when given, else
// env (SSLKEYLOGFILE, as curl and Python honour it); a Choice with Path ""
// when neither is set.
func Choose(flag, env string) Choice {
	switch {
	case flag != "":
		return Choice{Path: flag, Origin: FromFlag}
	case env != "":
		return Choice{Path: env, Origin: FromEnv}
	}
	return Choice{}
}

// Kind is what keeps a chosen key log from being read.
type Kind int

const (
	// Gzipped: a gzip'd key log. A key log is read as text, and read
	// again as it grows, so it is not read: it must be gunzipped first.
	Gzipped Kind = iota + 1
	// Capture: a capture file (Problem.Format names its format), most
	// likely given in the key log's place. It is not read.
	Capture
	// Absent: the file does not exist yet. It is kept, and read once it
	// appears (a client may be about to write it).
	Absent
	// Unreadable: the file cannot be opened or read (Problem.Err says
	// why).
	Unreadable
)

// Problem is a chosen key log that was not read. Its Error is the message
// for the user, without the program's name.
type Problem struct {
	Kind   Kind
	Choice Choice
	// Format names the capture format of a Capture: "pcap", "pcapng",
	// "gzip'd pcap", "gzip'd data".
	Format string
	// Err is AddFile's error for Absent (it wraps fs.ErrNotExist) and
	// Unreadable; nil else.
	Err error
	// Fatal is set when the run cannot go on without the file: a
	// --tls-keylog that is no key log or cannot be read, or that does not
	// exist while the capture is not live. Else the problem is a warning
	// (or, for an Absent --tls-keylog, a note) and the run goes on.
	Fatal bool
}

// Error says what is wrong with the key log and what to do.
func (p *Problem) Error() string {
	path := p.Choice.Path
	if p.Choice.Origin == FromFlag {
		switch {
		case p.Kind == Gzipped:
			return fmt.Sprintf("--tls-keylog %s: a gzip'd key log: gunzip it first (a key log is read as text, and read again as it grows)", path)
		case p.Kind == Capture:
			return fmt.Sprintf("--tls-keylog %s: a %s file, not a key log: give the capture as FILE and the key log (lines such as CLIENT_RANDOM …) with --tls-keylog", path, p.Format)
		case p.Kind == Absent && !p.Fatal:
			return fmt.Sprintf("--tls-keylog %s does not exist yet; it is read when it appears", path)
		}
		return fmt.Sprintf("--tls-keylog: %v", p.Err)
	}
	switch p.Kind {
	case Gzipped:
		return fmt.Sprintf("SSLKEYLOGFILE=%s is a gzip'd key log; it is not read (gunzip it first: a key log is read as text)", path)
	case Capture:
		return fmt.Sprintf("SSLKEYLOGFILE=%s is a %s file, not a key log; it is not read (TLS is decrypted only with keys inside the capture)", path, p.Format)
	case Absent:
		return fmt.Sprintf("SSLKEYLOGFILE=%s does not exist yet; it is read when it appears", path)
	}
	return fmt.Sprintf("SSLKEYLOGFILE=%s cannot be read (%v); TLS is decrypted only with keys inside the capture", path, p.Err)
}

// Unwrap returns AddFile's error, if any.
func (p *Problem) Unwrap() error { return p.Err }

// ChoiceOptions say how AddChoice judges the chosen file.
type ChoiceOptions struct {
	// Live is set when the capture is read as it is written (kwatch pcap
	// --follow, or a capture on stdin): a --tls-keylog that does not exist
	// yet may still come, and is no error.
	Live bool
	// CaptureFormat names the capture format a file's first bytes start
	// with ("pcap", "pcapng", "gzip'd data"), "" for none, as
	// pcap.CaptureFormat does; nil recognises none (a gzip'd key log is
	// still told).
	CaptureFormat func(prefix []byte) string
}

// AddChoice reads the key log file c names into l (AddFile), unless it is
// a gzip'd key log or a capture. It returns nil when the file was read or c
// names none, else what kept it from being read; an Absent file is kept
// and read once it appears.
func (l *Log) AddChoice(c Choice, opt ChoiceOptions) *Problem {
	if c.Path == "" {
		return nil
	}
	fatal := c.Origin == FromFlag
	if kind, format := sniff(c.Path, opt.CaptureFormat); kind != 0 {
		return &Problem{Kind: kind, Choice: c, Format: format, Fatal: fatal}
	}
	err := l.AddFile(c.Path)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return &Problem{Kind: Absent, Choice: c, Err: err, Fatal: fatal && !opt.Live}
	}
	return &Problem{Kind: Unreadable, Choice: c, Err: err, Fatal: fatal}
}

// sniff tells a regular file at path that is no key log: Gzipped when it is
// gzip'd and its first 256 bytes decompressed read as a key log, Capture
// (with its format) when captureFormat names what it starts with or, for a
// gzip'd file, what it holds ("gzip'd pcap"). It returns 0 for any other
// file, one that cannot be read (AddFile then says why), and what is not a
// regular file (a pipe is not opened here: its bytes would be gone).
func sniff(path string, captureFormat func([]byte) string) (Kind, string) {
	if captureFormat == nil {
		captureFormat = func([]byte) string { return "" }
	}
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return 0, ""
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, ""
	}
	defer f.Close()
	var head [4]byte
	if _, err := io.ReadFull(f, head[:]); err != nil {
		return 0, ""
	}
	format := captureFormat(head[:])
	if head[0] == 0x1f && head[1] == 0x8b {
		if _, err := f.Seek(0, io.SeekStart); err == nil {
			if zr, err := gzip.NewReader(f); err == nil {
				inner := make([]byte, 256)
				n, _ := io.ReadFull(zr, inner)
				switch inner = inner[:n]; {
				case LooksLikeKeyLog(inner):
					return Gzipped, ""
				case captureFormat(inner) != "":
					format = "gzip'd " + captureFormat(inner)
				}
			}
		}
	}
	if format == "" {
		return 0, ""
	}
	return Capture, format
}
