package httpconn

import (
	"strings"
	"testing"
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
