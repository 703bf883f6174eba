package main

import (
	"crypto/tls"
	"io"
	"net/http"

	"k8s.io/client-go/rest"
)

// README's key log snippet is withKeyLog below, between the markers,
// verbatim (cmd's TestREADMEKeyLogSnippet compares them).

// README: key log snippet begins
// withKeyLog makes cfg's connections write their TLS secrets to w in the
// NSS key log format (SSLKEYLOGFILE's), for kwatch pcap --tls-keylog or
// Wireshark. client-go wraps its transport, so setting the key log on it
// afterwards does not work: build the transport from cfg's TLS settings.
func withKeyLog(cfg *rest.Config, w io.Writer) error {
	tlsConfig, err := rest.TLSConfigFor(cfg) // CA, client certificate, server name, ALPN
	if err != nil || tlsConfig == nil {      // nil: plain http://
		return err
	}
	tlsConfig.KeyLogWriter = w
	cfg.Transport = &http.Transport{
		Proxy:             http.ProxyFromEnvironment,
		TLSClientConfig:   tlsConfig,
		ForceAttemptHTTP2: true, // as client-go's own transport
	}
	cfg.TLSClientConfig = rest.TLSClientConfig{} // now in the transport
	return nil
}

// README: key log snippet ends

// withMaxTLS12 makes cfg's connections TLS 1.2 at most: on the transport
// withKeyLog made, or on one built from cfg's TLS settings as it does.
func withMaxTLS12(cfg *rest.Config) error {
	if t, ok := cfg.Transport.(*http.Transport); ok {
		t.TLSClientConfig.MaxVersion = tls.VersionTLS12
		return nil
	}
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil || tlsConfig == nil {
		return err
	}
	tlsConfig.MaxVersion = tls.VersionTLS12
	cfg.Transport = &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true}
	cfg.TLSClientConfig = rest.TLSClientConfig{}
	return nil
}
