// Package testcert makes the self-signed certificates of kwatch's TLS tests,
// benchmarks and recorded captures, and of the TLS 1.2 handshake pkg/gotls
// makes with itself to learn its own closure layout (crypto/x509): a fresh
// key each time, valid for an hour around now.
package testcert

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"time"
)

// Key kinds for New.
const (
	ECDSA = "ecdsa" // P-256, for ECDHE-ECDSA and TLS 1.3
	RSA   = "rsa"   // 2048 bits, for ECDHE-RSA and RSA key exchange
)

// New returns a self-signed certificate of the kind of key asked for, for
// the DNS name and for 127.0.0.1, with its parsed Leaf. It returns key
// generation, signing and parsing errors.
func New(kind, name string) (tls.Certificate, error) {
	var priv crypto.Signer
	var err error
	if kind == RSA {
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	} else {
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, priv.Public(), priv)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv, Leaf: leaf}, nil
}

// NewTrusted is New for an ECDSA key, with a pool that trusts the
// certificate: for a client (tls.Config.RootCAs) of the server that
// presents it, named name (tls.Config.ServerName).
func NewTrusted(name string) (tls.Certificate, *x509.CertPool, error) {
	cert, err := New(ECDSA, name)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert.Leaf)
	return cert, roots, nil
}
