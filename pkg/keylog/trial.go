package keylog

import "slices"

// Trial is one key log connection's TLS 1.3 application traffic secrets
// (CLIENT_TRAFFIC_SECRET_0 and SERVER_TRAFFIC_SECRET_0, RFC 8446 §7.1), for
// trying on a connection whose handshake was not captured: a key log names
// a connection by its ClientHello's random, which such a capture never
// shows.
type Trial struct {
	// Random is the client random the key log names the connection by.
	Random Random
	// ClientTraffic and ServerTraffic are the secrets (32 or 48 bytes).
	ClientTraffic, ServerTraffic []byte
	// Source names the key log (a file name, or "pcapng").
	Source string
}

// DefaultTrialOpens bounds the record openings all the connections of one
// capture may spend on trying key log secrets (TakeTrialOpens): 1<<22,
// about a second of AES-GCM on records of a few hundred bytes (0.3 µs an
// opening, measured by TestTrialCaptures's no-match case on this
// project's 2-core machine).
const DefaultTrialOpens = 1 << 22

// Trials returns up to max of the key log's connections that have both
// TLS 1.3 application traffic secrets and that no connection has looked
// up yet (Lookup: a connection whose handshake was captured takes its
// own), the most recent first (a capture that begins mid-connection
// usually began soon after the handshake), and how many such connections
// there were in all. The secrets are copies.
func (l *Log) Trials(max int) ([]Trial, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if at := [3]int{l.gen, l.lookGen, max}; at != l.trialsAt || l.trials == nil {
		// Scanned once for every change, not for every connection:
		// a capture of many connections joined mid-way, with a key log
		// of many, would scan the whole log for each.
		l.trials, l.trialsAll = []Trial{}, 0
		l.trialsAt = at
		for _, r := range slices.Backward(l.order) {
			s, ok := l.secrets[r]
			if !ok || l.looked[r] || len(s.ClientTraffic) == 0 || len(s.ServerTraffic) == 0 {
				continue
			}
			l.trialsAll++
			if len(l.trials) < max {
				l.trials = append(l.trials, Trial{Random: r, ClientTraffic: s.ClientTraffic,
					ServerTraffic: s.ServerTraffic, Source: s.Source})
			}
		}
	}
	var out []Trial
	for _, t := range l.trials {
		t.ClientTraffic, t.ServerTraffic = slices.Clone(t.ClientTraffic), slices.Clone(t.ServerTraffic)
		out = append(out, t)
	}
	return out, l.trialsAll
}

// TrialOpensLeft is how many record openings are left of the Log's
// budget for trying secrets.
func (l *Log) TrialOpensLeft() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return DefaultTrialOpens - l.trialOpens
}

// TakeTrialOpens takes n record openings from the Log's budget for trying
// secrets (DefaultTrialOpens in all), and reports whether there were
// that many left; when there were not, none are taken.
func (l *Log) TakeTrialOpens(n int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n < 0 || l.trialOpens+n > DefaultTrialOpens {
		return false
	}
	l.trialOpens += n
	return true
}

// ReturnTrialOpens gives back n record openings TakeTrialOpens took and
// were not spent (the secrets were found before the last one).
func (l *Log) ReturnTrialOpens(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.trialOpens = max(0, l.trialOpens-max(0, n))
}
