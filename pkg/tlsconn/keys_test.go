package tlsconn

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The values of RFC 8448 §3 (a simple 1-RTT handshake,
// TLS_AES_128_GCM_SHA256): traffic secrets, the keys and IVs they give,
// and records protected with them.
const (
	rfc8448ClientHS  = "b3eddb126e067f35a780b3abf45e2d8f3b1a950738f52e9600746a0e27a55a21"
	rfc8448ServerHS  = "b67b7d690cc16c4e75e54213cb2d37b4e9c912bcded9105d42befd59d391ad38"
	rfc8448ClientApp = "9e40646ce79a7f9dc05af8889bce6552875afa0b06df0087f792ebb7c17504a5"
	rfc8448ServerApp = "a11af9f05531f856ad47116b45a950328204b4f44bfb6b3a4b4f1f3fcb631643"
	// The client's Finished under its handshake key, its application
	// data (the 50 bytes 00 01 … 31) and its close_notify under its
	// application key, and the server's application data (after its
	// NewSessionTicket: sequence number 1).
	rfc8448ClientFinished = "170303003575ec4dc238cce60b298044a71e219c56cc77b0517fe9b93c7a4bfc44d87f38f80338ac98fc46deb384bd1caeacab6867d726c40546"
	rfc8448ClientData     = "1703030043a23f7054b62c94d0affafe8228ba55cbefacea42f914aa66bcab3f2b9819a8a5b46b395bd54a9a20441e2b62974e1f5a6292a2977014bd1e3deae63aeebb21694915e4"
	rfc8448ClientAlert    = "1703030013c9872760655666b74d7ff1153efd6db6d0b0e3"
	rfc8448ServerData     = "17030300432e937e11ef4ac740e538ad36005fc4a46932fc3225d05f82aa1b36e30efaf97d90e6dffc602dcb501a59a8fcc49c4bf2e5f0a21c0047c2abf332540dd032e167c2955d"
)

// TestRFC8448KeySchedule checks HKDF-Expand-Label's keys and IVs against
// RFC 8448 §3's "derive write traffic keys" values.
func TestRFC8448KeySchedule(t *testing.T) {
	for _, c := range []struct{ secret, key, iv string }{
		{rfc8448ServerHS, "3fce516009c21727d0f2e4e86ee403bc", "5d313eb2671276ee13000b30"},
		{rfc8448ClientHS, "dbfaa693d1762c5b666af5d950258d01", "5bd3c71b836e0b76bb73265f"},
		{rfc8448ServerApp, "9f02283b6c9c07efc26bb9f2ac92e356", "cf782b88dd83549aadf1e984"},
		{rfc8448ClientApp, "17422dda596ed5d9acd890e3c63f5051", "5b78923dee08579033e523d9"},
	} {
		key, err := expandLabel(sha256.New, unhex(t, c.secret), "key", 16)
		if err != nil {
			t.Fatal(err)
		}
		iv, err := expandLabel(sha256.New, unhex(t, c.secret), "iv", 12)
		if err != nil {
			t.Fatal(err)
		}
		if hex.EncodeToString(key) != c.key || hex.EncodeToString(iv) != c.iv {
			t.Errorf("secret %s…: key %x iv %x, want %s %s", c.secret[:8], key, iv, c.key, c.iv)
		}
	}
}

// TestRFC8448Records decrypts RFC 8448 §3's protected records with the
// states derived from its secrets.
func TestRFC8448Records(t *testing.T) {
	s := suites[tls.TLS_AES_128_GCM_SHA256]
	state := func(secret string) *cipherState {
		cs, err := newTLS13State(s, unhex(t, secret))
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	payload := make([]byte, 50)
	for i := range payload {
		payload[i] = byte(i)
	}
	for _, c := range []struct {
		name, secret, record string
		seq                  uint64
		typ                  byte
		want                 []byte
	}{
		{"client Finished", rfc8448ClientHS, rfc8448ClientFinished, 0, typeHandshake,
			unhex(t, "14000020a8ec436d677634ae525ac1fcebe11a039ec17694fac6e98527b642f2edd5ce61")},
		{"client data", rfc8448ClientApp, rfc8448ClientData, 0, typeApplicationData, payload},
		{"client close_notify", rfc8448ClientApp, rfc8448ClientAlert, 1, typeAlert, []byte{1, 0}},
		{"server data", rfc8448ServerApp, rfc8448ServerData, 1, typeApplicationData, payload},
	} {
		rec := unhex(t, c.record)
		out, typ, err := state(c.secret).open(nil, rec[:5], rec[5:], c.seq)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if typ != c.typ || !bytes.Equal(out, c.want) {
			t.Errorf("%s: type %d %x, want %d %x", c.name, typ, out, c.typ, c.want)
		}
		// One sequence number off does not authenticate.
		if _, _, err := state(c.secret).open(nil, rec[:5], rec[5:], c.seq+1); err == nil {
			t.Errorf("%s opened under sequence number %d too", c.name, c.seq+1)
		}
	}
}

// TestPRF12 checks the TLS 1.2 PRF against the widely used P_SHA256 test
// vector of the IETF TLS working group (secret, seed and label "test
// label", 100 bytes).
func TestPRF12(t *testing.T) {
	secret := unhex(t, "9bbe436ba940f017b17652849a71db35")
	seed := unhex(t, "a0ba9f936cda311827a6f796ffd5198c")
	want := "e3f229ba727be17b8d122620557cd453c2aab21d07c3d495329b52d4e61edb5a6b301791e90d35c9c9a46b4e14baf9af0fa022f7077def17abfd3797c0564bab4fbc91666e9def9b97fce34f796789baa48082d122ee42c5a72e5a5110fff70187347b66"
	if got := hex.EncodeToString(prf12(sha256.New, secret, "test label", seed, 100)); got != want {
		t.Errorf("PRF = %s\nwant %s", got, want)
	}
}
