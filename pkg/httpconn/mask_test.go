package httpconn

import (
	"strings"
	"testing"
	"time"

	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/record"
)

func TestCredentialMask(t *testing.T) {
	req := "GET /api/v1/namespaces/default/configmaps?watch=true HTTP/1.1\r\n" +
		"Host: 127.0.0.1:6443\r\n" +
		"Authorization: Bearer 0a8de18a29ea988d01cae3ca4985617a\r\n" +
		"proxy-authorization:basic dXNlcjpwYXNz\r\n" +
		"Cookie:  session=abc; other=def\r\n" +
		"X-Remote-User: alice\r\n" +
		"Impersonate-User: system:admin\r\n" +
		"Authorization: sk-live-token-without-scheme\r\n" +
		"Authorization: Be4rer token\r\n" +
		"X-Authorization: keep\r\n" +
		"Accept: application/json\r\n\r\n"
	want := "GET /api/v1/namespaces/default/configmaps?watch=true HTTP/1.1\r\n" +
		"Host: 127.0.0.1:6443\r\n" +
		"Authorization: Bearer ********************************\r\n" +
		"proxy-authorization:basic ************\r\n" +
		"Cookie:  **********************\r\n" +
		"X-Remote-User: *****\r\n" +
		"Impersonate-User: ************\r\n" +
		"Authorization: ****************************\r\n" +
		"Authorization: Be**********\r\n" +
		"X-Authorization: keep\r\n" +
		"Accept: application/json\r\n\r\n"
	// Whole, then split at every byte: the state carries across writes.
	for split := 0; split <= len(req); split++ {
		var m CredentialMask
		in := []byte(req)
		got := string(m.Mask(in[:split])) + string(m.Mask(in[split:]))
		if got != want {
			t.Fatalf("split at %d:\n got %q\nwant %q", split, got, want)
		}
		if string(in) != req {
			t.Fatalf("split at %d: Mask changed its input", split)
		}
	}
	// Byte by byte.
	var m CredentialMask
	var b strings.Builder
	for i := range len(req) {
		b.Write(m.Mask([]byte{req[i]}))
	}
	if b.String() != want {
		t.Errorf("byte by byte:\n got %q\nwant %q", b.String(), want)
	}
}

// TestMalformedHeaderHidesCredentials: a malformed header line that holds
// a token (a control byte in it, or no colon) is reported without it.
func TestMalformedHeaderHidesCredentials(t *testing.T) {
	for _, line := range []string{"Authorization: Bearer SECRET-TOKEN-123\x01", "Authorization Bearer SECRET-TOKEN-456", "cookie session=SECRET-TOKEN-789\x7f"} {
		var details []string
		sink := record.SinkFunc(func(r record.Record) {
			if p, ok := r.(*record.Problem); ok {
				details = append(details, p.Kind+": "+p.Detail)
			}
		})
		c := New(&record.Conn{ID: 1}, sink, &exchange.Limits{}, nil)
		c.ClientData([]byte("GET /api/v1/pods?watch=1 HTTP/1.1\r\nHost: x\r\n"+line+"\r\n\r\n"), time.Time{})
		if len(details) == 0 || strings.Contains(strings.Join(details, "\n"), "SECRET") {
			t.Errorf("%q: problems %q, want one without the token", line, details)
		}
	}
}
