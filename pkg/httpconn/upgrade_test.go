package httpconn_test

import (
	"strings"
	"testing"
)

// TestUpgradeOtherProtocol: after a 101 Switching Protocols to a protocol
// other than h2c (a WebSocket, as kubectl exec's through the API server
// and the API server's to the kubelet), neither direction is HTTP/1.1: the
// client's frames after its request are no header section cut short, even
// when they are read before the 101.
func TestUpgradeOtherProtocol(t *testing.T) {
	client := "GET /api/v1/namespaces/ns/pods/p/exec?command=sh HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n" +
		"\x82\x85abcd\x09\x07\x0f\x08\x0e"
	server := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x82\x03out"
	lines := runConn(t, []byte(client), []byte(server), 0, whole)
	notes := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "*record.Problem") {
			t.Errorf("a problem: %s", l)
		}
		if strings.Contains(l, "101 Switching Protocols to websocket: the rest of the connection is not HTTP/1.1") {
			notes++
		}
	}
	if notes != 1 {
		t.Errorf("%d notes of the switch, want 1:\n%s", notes, strings.Join(lines, "\n"))
	}
}
