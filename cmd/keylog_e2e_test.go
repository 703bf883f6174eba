package cmd

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kwatch/kwatch/internal/e2e"
)

// keyLogSnippet returns README's key log snippet as kwatch-watcher holds it:
// the lines of internal/e2e/cmd/kwatch-watcher/keylog.go between its
// markers.
func keyLogSnippet(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../internal/e2e/cmd/kwatch-watcher/keylog.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok1 := strings.Cut(string(b), "// README: key log snippet begins\n")
	snippet, _, ok2 := strings.Cut(rest, "\n// README: key log snippet ends")
	if !ok1 || !ok2 {
		t.Fatal("keylog.go has no key log snippet between its markers")
	}
	return strings.TrimRight(snippet, "\n")
}

// TestREADMEKeyLogSnippet: README's client-go key log snippet is the code
// kwatch-watcher runs (TestKeyLogSnippetCapture), verbatim.
func TestREADMEKeyLogSnippet(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+keyLogSnippet(t)+"\n```\n") {
		t.Errorf("README.md does not hold the key log snippet of internal/e2e/cmd/kwatch-watcher/keylog.go in a go block:\n%s", keyLogSnippet(t))
	}
}

// TestKeyLogSnippetCapture: a client-go v0.37 program (kwatch-watcher: an
// informer and a Watch over HTTP/2, TLS 1.3) with README's key log snippet
// writes the secrets of its connections; tcpdump captures them (through a
// relay of the test's own, so that the capture holds them alone), and
// kwatch pcap with that key log decrypts them: both watches' events equal
// those the program's handlers received.
func TestKeyLogSnippetCapture(t *testing.T) {
	env := e2e.Cluster(t)
	ns := env.Namespace(t)
	relay := relayTo(t, apiServerAddr(t, env.RESTConfig(t)))
	keys := filepath.Join(t.TempDir(), "keys.log")
	capture := tcpdumpCapture(t, fmt.Sprintf("tcp port %d", relay.Port), dialMarker(&net.Dialer{}, relay.String()))
	w := startWatcher(t, env, buildWatcher(t), ns, "-keylog", keys, "-server", relay.String())
	churn(t, env, ns, "keyed")
	w.waitEvents(t, 3, "watch", "informer")
	want := w.clientEvents(t)
	w.stop()
	file := filepath.Join(t.TempDir(), "api.pcap")
	if err := os.WriteFile(file, capture(), 0o600); err != nil {
		t.Fatal(err)
	}
	recs, _, errOut := pcapJSON(t, "--tls-keylog", keys, file)
	if got := kwatchEvents(t, recs, ns, true); !sameWatches(got, want) {
		t.Errorf("from the capture: %v\nthe handlers': %v\n%s", got, want, errOut)
	}
}
