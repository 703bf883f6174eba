// Package watchclient runs a live Kubernetes list-watch and shows every watch
// event with the chunks or DATA frames it arrived in. The watch connection
// is tapped: the bytes it carries (decrypted, for TLS) go through the same
// switchboard (pkg/wire) and followers as a packet capture, so live and
// captured traffic are decoded by one decoder.
//
// It follows the list-watch protocol (Kubernetes API concepts: efficient
// detection of changes): LIST, then WATCH from the list's resourceVersion
// with bookmarks; watch again from the last resourceVersion seen when the
// server ends a watch; LIST again when that version is too old (410 Gone),
// reporting what changed while nobody watched. Lists, watches, discovery and
// credentials use client-go.
package watchclient

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kwatch/kwatch/pkg/pcapwriter"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/wire"
)

// DefaultProxyURL is where `kubectl proxy` listens by default.
const DefaultProxyURL = "http://127.0.0.1:8001"

// ConnectOptions say where the API server is.
type ConnectOptions struct {
	// ProxyURL, when set, reaches the API server through kubectl proxy
	// (plain HTTP/1.1, no credentials).
	ProxyURL string
	// ProxyFrom says where ProxyURL came from when no flag gave it, after
	// the URL in Transport ("from $KWATCH_PROXY", "the default address");
	// empty says nothing more.
	ProxyFrom string
	// ClientConfig, when set, gives the API server and credentials (kubectl's
	// connection flags: genericclioptions.ConfigFlags.ToRawKubeConfigLoader);
	// Kubeconfig and Context are then ignored.
	ClientConfig clientcmd.ClientConfig
	// Kubeconfig and Context select a kubeconfig file and context, as
	// kubectl's --kubeconfig and --context do; empty means kubectl's
	// defaults ($KUBECONFIG, ~/.kube/config, current-context).
	Kubeconfig, Context string
	// ContextName names the kubeconfig context ClientConfig uses, for
	// Transport (kubectl's --context, or the kubeconfig's
	// current-context); empty names none. Without ClientConfig, Context
	// or the kubeconfig's current-context is named.
	ContextName string
	// HTTP2 keeps HTTP/2 on a direct TLS connection: events are shown
	// without chunks, since HTTP/2 has no chunked coding.
	HTTP2 bool
	// DisableCompression stops asking for gzip'd bodies (Accept-Encoding:
	// gzip, which every Go client sends and to which the API server
	// answers a watch-list gzip'd), as kubectl's --disable-compression.
	DisableCompression bool
	// HTTP tunes the decoding of the tapped bytes.
	HTTP wire.Options
	// UserAgent is sent with every request (e.g. "kwatch/v0.1.0").
	UserAgent string
	// Record, if set, receives the bytes of every tapped connection as
	// synthesised TCP segments (kwatch stream --record): the decrypted
	// bytes (credentials masked), or, when it writes pcapng, a TLS
	// connection's bytes as they travelled with its keys in Decryption
	// Secrets Blocks.
	Record *pcapwriter.Writer
	// KeyLog, if set, receives the TLS keys of every tapped connection in
	// the NSS key log format (tls.Config.KeyLogWriter; kwatch stream
	// --tls-keylog), so that a capture of them can be decrypted.
	KeyLog io.Writer
	// Warnings, if set, receives the API server's warnings (e.g.
	// deprecated APIs), one line each, without repeats.
	Warnings io.Writer
	// ConnIDs, if set, numbers the tapped connections (record.Conn.ID),
	// shared by several Clients writing to one output (kwatch stream with
	// several resources); otherwise each Client numbers from 1.
	ConnIDs *atomic.Int64
	// WatchNumbers, if set, numbers the watches started
	// (record.WatchStart.Number), shared as ConnIDs is, so that kwatch
	// stream pods,configmaps shows WATCH 1, 2, 3 … across its types;
	// otherwise each Client numbers its watches from 1.
	WatchNumbers *atomic.Int64
}

// Client holds what a list-watch needs: a client-go config for LIST and
// discovery, and an HTTP client whose watch connections are tapped.
type Client struct {
	// Config is the client-go configuration (credentials included; never
	// printed).
	Config *rest.Config
	// Transport describes how watch bytes travel, for people.
	Transport string
	// Namespace is the kubeconfig context's namespace ("" if none).
	Namespace string

	watchHTTP *http.Client
	// apiHTTP, when set, carries discovery and LIST instead of client-go's
	// own transport: one whose TLS keys go to ConnectOptions.KeyLog.
	apiHTTP *http.Client
	sink    *lockedSink
	http2   bool
	httpOpt wire.Options
	// watchNos numbers the watches started (ConnectOptions.WatchNumbers).
	watchNos *atomic.Int64
}

// watchReadBuffer is the watch connections' read buffer, in bytes. The
// tap decodes what each read returns, taking the sink's lock and flushing
// the output once per read: net/http's default of 4 KiB made a busy watch
// cost a read, a lock and a flush per 4 KiB.
const watchReadBuffer = 64 << 10

// ProxyAnswers reports whether a kubectl proxy answers at proxyURL within
// timeout (GET /version).
func ProxyAnswers(ctx context.Context, proxyURL string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(proxyURL, "/")+"/version", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Connect builds a Client that sends records of tapped watch connections to
// sink. It returns an error when the kubeconfig cannot be loaded or the
// proxy URL is malformed.
func Connect(opt ConnectOptions, sink record.Sink) (*Client, error) {
	c := &Client{sink: newLockedSink(sink), http2: opt.HTTP2, httpOpt: opt.HTTP}
	c.sink.ids = opt.ConnIDs
	c.watchNos = opt.WatchNumbers
	if c.watchNos == nil {
		c.watchNos = new(atomic.Int64)
	}
	t := &tapper{sink: c.sink, board: wire.NewBoard(c.httpOpt), rec: opt.Record, http2: opt.HTTP2, keyLog: opt.KeyLog}
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if opt.ProxyURL != "" {
		if opt.HTTP2 {
			// The proxy speaks HTTP/1.1, tapped as such; decoding its
			// body as HTTP/2 as well would show every event twice.
			return nil, fmt.Errorf("HTTP/2 applies to a direct TLS connection, not to kubectl proxy %s", opt.ProxyURL)
		}
		u, err := url.Parse(opt.ProxyURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("proxy URL %q: want http://HOST:PORT", opt.ProxyURL)
		}
		c.Config = &rest.Config{Host: opt.ProxyURL}
		c.setCommon(opt)
		c.Transport = "HTTP/1.1 through kubectl proxy " + opt.ProxyURL
		if opt.ProxyFrom != "" {
			c.Transport += " (" + opt.ProxyFrom + ")"
		}
		tr := &http.Transport{DialContext: t.plainDialer(dialer.DialContext), DisableKeepAlives: true,
			DisableCompression: opt.DisableCompression, ForceAttemptHTTP2: false, ReadBufferSize: watchReadBuffer}
		c.watchHTTP = &http.Client{Transport: tr}
		return c, nil
	}
	cc := opt.ClientConfig
	if cc == nil {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = opt.Kubeconfig
		cc = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: opt.Context})
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	// Transport names the server and the context its credentials come
	// from: "straight to https://… (context kind-kind; …)".
	ctxName, server := opt.ContextName, cfg.Host
	if opt.ClientConfig == nil {
		ctxName = opt.Context
		if raw, err := cc.RawConfig(); err == nil && ctxName == "" {
			ctxName = raw.CurrentContext
		}
	}
	how := func(decoded string) string {
		var says []string
		if ctxName != "" {
			says = append(says, "context "+ctxName)
		}
		if decoded != "" {
			says = append(says, decoded)
		}
		if len(says) == 0 {
			return server
		}
		return server + " (" + strings.Join(says, "; ") + ")"
	}
	if ns, _, err := cc.Namespace(); err == nil {
		c.Namespace = ns
	}
	c.Config = cfg
	c.setCommon(opt)
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	dial := dialer.DialContext
	if cfg.Dial != nil {
		dial = cfg.Dial
	} else if h, err := cfg.TransportConfig(); err == nil && h.DialHolder != nil && h.DialHolder.Dial != nil {
		// Exec credential plugins track connections through DialHolder.
		dial = h.DialHolder.Dial
	}
	proxyFunc := http.ProxyFromEnvironment
	if cfg.Proxy != nil { // --proxy-url or the kubeconfig's proxy-url
		proxyFunc = cfg.Proxy
	}
	if opt.KeyLog != nil && tlsCfg != nil {
		// Discovery and LIST on a transport of kwatch's own, as
		// client-go's but for the key log (client-go has no option for
		// one), so that a capture of all of kwatch's connections decrypts.
		api := tlsCfg.Clone()
		api.KeyLogWriter = keyLogWriter{opt.KeyLog}
		tr := &http.Transport{Proxy: proxyFunc, TLSClientConfig: api, DialContext: dial, ForceAttemptHTTP2: true,
			TLSHandshakeTimeout: 10 * time.Second, MaxIdleConnsPerHost: 25, DisableCompression: opt.DisableCompression}
		rt, err := rest.HTTPWrappersForConfig(cfg, tr)
		if err != nil {
			return nil, err
		}
		c.apiHTTP = &http.Client{Transport: rt}
	}
	if opt.HTTP2 {
		// HTTP/2 on a TLS connection kwatch makes itself (ALPN h2), so
		// that the tap sees the decrypted frames: net/http is told the
		// connection is HTTP/2 with prior knowledge (RFC 9113 §3.3) and
		// sent its requests as http:// (httpsAsHTTP).
		h2 := new(http.Protocols)
		h2.SetUnencryptedHTTP2(true)
		tr := &http.Transport{Protocols: h2, DisableCompression: opt.DisableCompression, ReadBufferSize: watchReadBuffer,
			HTTP2: http2HealthCheck()}
		var rt http.RoundTripper = tr
		if tlsCfg != nil {
			tr.DialContext = t.tlsDialer(dial, tlsCfg, "h2")
			rt = httpsAsHTTP{tr}
			c.Transport = "HTTP/2 over TLS straight to " + how("decrypted frames decoded")
		} else {
			tr.DialContext = t.plainDialer(dial)
			c.Transport = "HTTP/2 with prior knowledge straight to " + how("")
		}
		if rt, err = rest.HTTPWrappersForConfig(cfg, rt); err != nil {
			return nil, err
		}
		c.watchHTTP = &http.Client{Transport: rt}
		return c, nil
	}
	tr := &http.Transport{Proxy: proxyFunc, DisableKeepAlives: true, DisableCompression: opt.DisableCompression,
		ReadBufferSize: watchReadBuffer}
	if tlsCfg != nil {
		tr.DialTLSContext = t.tlsDialer(dial, tlsCfg, "http/1.1")
		c.Transport = "HTTP/1.1 over TLS straight to " + how("decrypted bytes decoded")
	} else {
		tr.DialContext = t.plainDialer(dial)
		c.Transport = "HTTP/1.1 straight to " + how("")
	}
	rt, err := rest.HTTPWrappersForConfig(cfg, tr)
	if err != nil {
		return nil, err
	}
	c.watchHTTP = &http.Client{Transport: rt}
	return c, nil
}

// http2HealthCheck returns the HTTP/2 connection health check client-go
// configures (k8s.io/apimachinery/pkg/util/net, whose functions for it are
// not exported): a PING after 30 s without a frame, the connection closed
// when its ACK takes over 15 s; HTTP2_READ_IDLE_TIMEOUT_SECONDS and
// HTTP2_PING_TIMEOUT_SECONDS change them as they do for client-go (0
// turns the check off), so that kwatch's connection behaves as an
// informer's and its PINGs show.
func http2HealthCheck() *http.HTTP2Config {
	seconds := func(env string, def int) time.Duration {
		if n, err := strconv.Atoi(os.Getenv(env)); err == nil && n >= 0 {
			return time.Duration(n) * time.Second
		}
		return time.Duration(def) * time.Second
	}
	return &http.HTTP2Config{SendPingTimeout: seconds("HTTP2_READ_IDLE_TIMEOUT_SECONDS", 30),
		PingTimeout: seconds("HTTP2_PING_TIMEOUT_SECONDS", 15)}
}

// httpsAsHTTP sends https:// requests as http:// on a transport whose
// connections are TLS already (kwatch's own dialer): net/http then speaks
// HTTP/2 with prior knowledge on them.
type httpsAsHTTP struct{ rt http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (h httpsAsHTTP) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "https" {
		r := req.Clone(req.Context())
		r.URL.Scheme = "http"
		req = r
	}
	return h.rt.RoundTrip(req)
}

func (c *Client) setCommon(opt ConnectOptions) {
	if opt.UserAgent != "" {
		c.Config.UserAgent = opt.UserAgent
	}
	if opt.Warnings != nil {
		c.Config.WarningHandler = rest.NewWarningWriter(opt.Warnings, rest.WarningWriterOptions{Deduplicate: true})
	} else {
		c.Config.WarningHandler = rest.NoWarnings{}
	}
}

// Close ends the Client's use of the sink given to Connect: it closes the
// tapped connections still open, waits until what they had read and how
// they ended has been decoded, then lets nothing more through (net/http
// closes connections on goroutines of its own, and their decoding may
// otherwise run on while the caller prints its summary and closes its
// printer). Call it once Run has returned.
func (c *Client) Close() {
	c.sink.closeTapped()
	c.sink.drain()
	c.sink.mu.Lock()
	c.sink.detached = true
	c.sink.mu.Unlock()
}

// WireBytes returns the bytes read on tapped connections so far.
func (c *Client) WireBytes() int64 {
	c.sink.drain()
	c.sink.mu.Lock()
	defer c.sink.mu.Unlock()
	return c.sink.bytes
}

// Resource is a resource resolved through discovery.
type Resource struct {
	GVR        schema.GroupVersionResource
	Kind       string
	Namespaced bool
}

// CoreSecrets reports whether r is the core group's secrets: a watch of
// them is recorded only with --show-secrets, and the objects its LIST gives
// are redacted as Secrets whatever their kind says.
func (r Resource) CoreSecrets() bool { return r.GVR.Group == "" && r.GVR.Resource == "secrets" }

// String returns "configmaps" for the core group, "deployments.apps" otherwise.
func (r Resource) String() string { return r.GVR.GroupResource().String() }

// Resolve maps a resource argument as kubectl does ("pods", "po",
// "deployments.apps", "deploy", a CRD's plural or short name) to a resource
// through discovery and its short names. It returns an error naming the
// argument when nothing matches.
func (c *Client) Resolve(ctx context.Context, arg string) (Resource, error) {
	// Discovery takes no context: it runs on a goroutine of its own, so
	// that Ctrl-C ends the wait for a server that does not answer.
	type result struct {
		r   Resource
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := c.resolve(arg)
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		return res.r, res.err
	case <-ctx.Done():
		return Resource{}, fmt.Errorf("resolving %q: interrupted before the server answered discovery", arg)
	}
}

func (c *Client) resolve(arg string) (Resource, error) {
	dc, err := c.discovery()
	if err != nil {
		return Resource{}, err
	}
	cached := memory.NewMemCacheClient(dc)
	mapper := restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(cached), cached, nil)
	gvr, gr := schema.ParseResourceArg(strings.ToLower(arg))
	var found schema.GroupVersionResource
	if gvr != nil {
		found, err = mapper.ResourceFor(*gvr)
	}
	if gvr == nil || err != nil {
		found, err = mapper.ResourceFor(gr.WithVersion(""))
	}
	if err != nil {
		if meta.IsNoMatchError(err) {
			return Resource{}, fmt.Errorf("the server doesn't have a resource type %q (kubectl api-resources lists them)", arg)
		}
		return Resource{}, fmt.Errorf("resolving %q: %w", arg, err)
	}
	gvk, err := mapper.KindFor(found)
	if err != nil {
		return Resource{}, err
	}
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return Resource{}, err
	}
	return Resource{GVR: found, Kind: gvk.Kind, Namespaced: m.Scope.Name() == meta.RESTScopeNameNamespace}, nil
}

// cborCodecs is client-go's scheme codecs with apimachinery's CBOR
// serializer added (client-go rest.Config's default codec factory).
var cborCodecs = serializer.NewCodecFactory(scheme.Scheme, serializer.WithSerializer(cbor.NewSerializerInfo))

func (c *Client) dynamic() (dynamic.Interface, error) {
	if c.apiHTTP != nil {
		return dynamic.NewForConfigAndClient(c.Config, c.apiHTTP)
	}
	return dynamic.NewForConfig(c.Config)
}

// discovery returns a discovery client on apiHTTP when there is one.
func (c *Client) discovery() (*discovery.DiscoveryClient, error) {
	if c.apiHTTP != nil {
		return discovery.NewDiscoveryClientForConfigAndClient(c.Config, c.apiHTTP)
	}
	return discovery.NewDiscoveryClientForConfig(c.Config)
}

// watchREST returns a REST client on the tapped HTTP client.
func (c *Client) watchREST() (*rest.RESTClient, error) {
	cfg := rest.CopyConfig(c.Config)
	// With CBOR, as client-go's rest.Config does, so that an error status
	// sent as CBOR is read.
	cfg.NegotiatedSerializer = cborCodecs.WithoutConversion()
	if cfg.GroupVersion == nil {
		cfg.GroupVersion = &schema.GroupVersion{}
	}
	// The watch returns once response headers arrive; the body is read
	// as long as the server keeps it open.
	cfg.Timeout = 0
	return rest.UnversionedRESTClientForConfigAndClient(cfg, c.watchHTTP)
}
