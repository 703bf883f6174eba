package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/pcapwriter"
	"github.com/kwatch/kwatch/pkg/printer"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/watchclient"
	"github.com/kwatch/kwatch/pkg/wire"
)

// defaultBookmarkTimeout is --bookmark-timeout's default: half as long
// again as kube-apiserver's bookmark frequency (a minute, its watch
// cache's), so that one late bookmark is not taken for silence.
const defaultBookmarkTimeout = 90 * time.Second

type streamOptions struct {
	output outputOptions
	// kube holds kubectl's connection flags (--kubeconfig, --context,
	// --server, --token, --as, -n, …), as cli-runtime defines them.
	kube            *genericclioptions.ConfigFlags
	allNamespaces   bool
	selector        string
	fieldSelector   string
	resourceVersion string
	proxy           string
	// proxyFrom says where proxy came from when no flag gave it
	// (ConnectOptions.ProxyFrom); "" for --proxy.
	proxyFrom   string
	raw         string
	http2       bool
	proto       bool
	cbor        bool
	watchOnly   bool
	listMode    string
	timeout     time.Duration
	idleTimeout time.Duration
	// bookmarkTimeout is WatchOptions.QuietAfter.
	bookmarkTimeout time.Duration
	record          string
	tlsKeylog       string

	resource, name string
	// resources lists the resource types of a stream of several
	// (kwatch stream pods,configmaps or pods configmaps); empty for one.
	resources []string
	namespace string // -n as given
	// direct: a flag that names the API server or credentials was given
	// (or $KUBECONFIG is set): connect straight, never through a proxy
	// picked by default.
	direct bool
	// directFlag names one such flag, for messages.
	directFlag string
	// resolved holds the resource types already resolved through
	// discovery, by argument (resolveForRecord), for watchOptions.
	resolved map[string]watchclient.Resource
}

// connectionFlags are kubectl's flags (genericclioptions.ConfigFlags) that
// choose the API server or the credentials: any of them means "connect
// straight", not through kubectl proxy.
var connectionFlags = []string{"kubeconfig", "context", "cluster", "user", "server", "token", "as", "as-group", "as-uid",
	"as-user-extra", "certificate-authority", "client-certificate", "client-key", "tls-server-name", "insecure-skip-tls-verify", "proxy-url"}

func newStreamCommand(streams IOStreams) *cobra.Command {
	o := &streamOptions{}
	c := &cobra.Command{
		Use: "stream (RESOURCE[/NAME] | TYPE[,TYPE...] | --raw PATH)",
		// kubectl get -w's words for it.
		SuggestFor: []string{"watch", "get", "live"},
		Short:      "Run a live list-watch and show every event with the chunks it arrived in",
		Long: `List-watch a resource as client-go 0.37's informers do (a streaming list:
the current state as the watch's first events, gzip'd; or --list-mode list:
LIST, then WATCH), and show every watch event with the HTTP/1.1 chunk(s) or
HTTP/2 DATA frames that carried it, read off the watch connection by the same
decoder as kwatch pcap. When the server ends a watch, kwatch watches again
from the last resourceVersion it saw (bookmarks included); when that version
is too old (410 Gone) it gets the state again and shows what changed while
nobody was watching. Several resource types (pods,configmaps) are watched at
once, each its own list-watch.

Where it connects: through kubectl proxy (--proxy, else $KWATCH_PROXY unless a
flag connects straight; else http://127.0.0.1:8001 when it answers and neither
--kubeconfig, --context nor $KUBECONFIG is set), or straight to the API server
from a kubeconfig. Each WATCH line, the first one included, names the proxy
(and where it came from) or the server and the kubeconfig context. Straight
over TLS, kwatch asks for HTTP/1.1 and decodes the decrypted bytes; with
--http2 it speaks HTTP/2 and decodes the decrypted frames (several types then
share one connection, each watch a stream).

Ctrl-C (or SIGTERM) ends with a summary. Exit status: 0 after Ctrl-C, 1 when the
watch cannot go on (the API server refuses it: 400, 401, 403, 404, 405, 406,
415, 422; the resource type does not exist; the API server or kubectl proxy
refuses the connection before anything answered; a run that never opened a
watch), 2 for bad flags or an unusable kubeconfig.`,
		Example: `  # Through kubectl proxy (run "kubectl proxy" first)
  kwatch stream configmaps -n kube-system

  # One object, straight to the API server from your kubeconfig
  kwatch stream --kubeconfig ~/.kube/config deployments.apps/coredns -n kube-system

  # Every pod in the cluster as protobuf; the server ends each watch after 30s
  # and kwatch resumes from the last resourceVersion (bookmarks included)
  kwatch stream pods -A --proto --timeout 30s

  # Pods and configmaps at once, each its own list-watch, over HTTP/2 with
  # the DATA frames of every event
  kwatch stream pods,configmaps -n kube-system --kubeconfig ~/.kube/config --http2

  # Record the session, then read it back (or open it in Wireshark)
  kwatch stream configmaps --record session.pcap
  kwatch pcap session.pcap

  # Straight to the API server: record the TLS bytes with their keys inside
  # (the file decrypts to the token: keep it as a kubeconfig), and write the
  # keys to a key log for a tcpdump capture taken meanwhile
  kwatch stream configmaps --kubeconfig ~/.kube/config --record session.pcapng --tls-keylog keys.log
  kwatch pcap session.pcapng

  # An exact watch path, as curl would request it
  kwatch stream --raw '/api/v1/namespaces/default/configmaps?watch=1'

  # JSON Lines: event type, name and chunk sizes
  kwatch stream configmaps -o json | jq -c 'select(.record=="event") | [.type, .name, [.chunks[].size]]'`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.complete(cmd, args, streams); err != nil {
				return &exitError{code: ExitUsage, err: err}
			}
			return o.run(cmd.Context(), cmd, streams)
		},
	}
	o.addFlags(c.Flags())
	o.registerCompletions(c, streams)
	return c
}

// addFlags defines kwatch stream's flags on fs: the output flags,
// kubectl's connection flags, and the watch's own.
func (o *streamOptions) addFlags(fs *pflag.FlagSet) {
	o.output.addFlags(fs)
	// kubectl's connection flags, from the library kubectl itself uses.
	o.kube = genericclioptions.NewConfigFlags(true)
	o.kube.CacheDir = nil // kwatch keeps no discovery cache on disk
	o.kube.AddFlags(fs)
	// In kwatch's style (lower case, no full stop), the meaning kubectl
	// gives them.
	for name, usage := range kubeFlagUsage {
		if f := fs.Lookup(name); f != nil {
			f.Usage = usage
		}
	}
	fs.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "watch all namespaces (wins over --namespace, as in kubectl)")
	fs.StringVarP(&o.selector, "selector", "l", "", "label selector, e.g. -l app=web")
	fs.StringVar(&o.fieldSelector, "field-selector", "", "field selector, e.g. --field-selector metadata.name=web")
	fs.StringVar(&o.resourceVersion, "resource-version", "", "watch from this resourceVersion without listing first")
	fs.BoolVar(&o.watchOnly, "watch-only", false, "do not show the objects of the initial LIST, only the watch events (as kubectl get --watch-only)")
	fs.StringVar(&o.listMode, "list-mode", "watch-list", "how the current state comes: watch-list (a streaming list: the watch's first events, sendInitialEvents=true, as client-go 0.37's informers do; a server that refuses it is listed) or list (LIST, then WATCH from its resourceVersion; --watch-only implies it)")
	fs.StringVar(&o.proxy, "proxy", "", "reach the API server through this kubectl proxy, e.g. 127.0.0.1:8001 or http://127.0.0.1:8001 (default: $KWATCH_PROXY, unless a flag connects straight; --proxy '' leaves it out)")
	fs.StringVar(&o.raw, "raw", "", "watch this exact path and query instead of RESOURCE (no LIST)")
	fs.BoolVar(&o.http2, "http2", false, "speak HTTP/2 on the direct TLS connection (ALPN h2, as client-go does; the watches of several resource types share the connection, each a stream): events with their DATA frames, and the connection's SETTINGS, PINGs, flow-control stalls, RST_STREAM and GOAWAY")
	fs.BoolVar(&o.proto, "proto", false, "ask for protobuf watch events (application/vnd.kubernetes.protobuf;stream=watch; built-in types; JSON is used for custom resources, as client-go does)")
	fs.BoolVar(&o.cbor, "cbor", false, "ask for CBOR watch events (Accept: application/cbor; the server answers application/cbor-seq; alpha in Kubernetes 1.37: the API server needs the feature gate CBORServingAndStorage, and a server without it is watched as JSON)")
	fs.Var(durationValue{&o.timeout}, "timeout", "ask the server to end each watch after this long, in whole seconds (timeoutSeconds), e.g. 30s or 5m; kwatch then resumes")
	fs.StringVar(&o.record, "record", "", "also write the watch connections' bytes to this capture file (synthesised TCP segments), for kwatch pcap or Wireshark: a .pcapng holds a direct TLS connection as it travelled with its keys (anyone with the file can decrypt it, token included); a .pcap holds the decrypted bytes, credentials masked")
	fs.StringVar(&o.tlsKeylog, "tls-keylog", "", "append the TLS keys of kwatch's connections to this key log (NSS format, for kwatch pcap --tls-keylog or Wireshark; default: $SSLKEYLOGFILE)")
	o.bookmarkTimeout = defaultBookmarkTimeout
	fs.Var(durationValue{&o.bookmarkTimeout}, "bookmark-timeout", "say so when a watch gets neither an event nor a bookmark for this long (the API server sends one about every minute), with the likely cause (an etcd restored or reset); the watch goes on (0: never)")
	fs.Var(durationValue{&o.idleTimeout}, "idle-timeout", "end a watch that reads no byte for this long, e.g. 90s (a stalled server or proxy), report it and watch again (0: never)")
}

// kubeFlagUsage is the help text of kubectl's connection flags
// (cli-runtime's ConfigFlags) in kwatch's style: lower case, no full stop.
var kubeFlagUsage = map[string]string{
	"namespace":                "namespace to watch (default: the kubeconfig context's, or \"default\")",
	"request-timeout":          "give up on a discovery or LIST request after this long, e.g. 10s (0: never); watches are bounded by --timeout and --idle-timeout instead",
	"kubeconfig":               "path to the kubeconfig file to use (default: $KUBECONFIG, or ~/.kube/config); connects straight to the API server",
	"context":                  "name of the kubeconfig context to use",
	"cluster":                  "name of the kubeconfig cluster to use",
	"user":                     "name of the kubeconfig user to use",
	"server":                   "address and port of the Kubernetes API server",
	"token":                    "bearer token for authentication to the API server",
	"as":                       "user name to impersonate for the operation: a regular user or a service account in a namespace",
	"as-group":                 "group to impersonate for the operation (repeatable, one group each)",
	"as-uid":                   "UID to impersonate for the operation",
	"as-user-extra":            "user extras to impersonate for the operation (repeatable, for several values of one key)",
	"certificate-authority":    "path to a cert file for the certificate authority",
	"client-certificate":       "path to a client certificate file for TLS",
	"client-key":               "path to a client key file for TLS",
	"tls-server-name":          "server name to validate the server's certificate with (default: the host name used to contact the server)",
	"insecure-skip-tls-verify": "do not check the server's certificate for validity (HTTPS connections become insecure)",
	"proxy-url":                "HTTP proxy to reach the API server through (not kubectl proxy: that is --proxy)",
	"disable-compression":      "do not ask for compressed responses (by default kwatch asks for gzip, as every Go client does)",
}

// registerCompletions completes the flags and arguments of c as kubectl
// does: contexts, clusters and users from the kubeconfig; namespaces and
// resource types from the cluster the other flags point at.
func (o *streamOptions) registerCompletions(c *cobra.Command, streams IOStreams) {
	_ = c.RegisterFlagCompletionFunc("output", fixedCompletion("pretty", "json"))
	_ = c.RegisterFlagCompletionFunc("color", fixedCompletion("auto", "always", "never"))
	kubeconfigNames := func(pick func(*clientcmdapi.Config) []string) cobra.CompletionFunc {
		return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			raw, err := o.kube.ToRawKubeConfigLoader().RawConfig()
			if err != nil {
				return nil, cobra.ShellCompDirectiveError
			}
			names := pick(&raw)
			slices.Sort(names)
			return names, cobra.ShellCompDirectiveNoFileComp
		}
	}
	_ = c.RegisterFlagCompletionFunc("context", kubeconfigNames(func(c *clientcmdapi.Config) []string { return slices.Collect(maps.Keys(c.Contexts)) }))
	_ = c.RegisterFlagCompletionFunc("cluster", kubeconfigNames(func(c *clientcmdapi.Config) []string { return slices.Collect(maps.Keys(c.Clusters)) }))
	_ = c.RegisterFlagCompletionFunc("user", kubeconfigNames(func(c *clientcmdapi.Config) []string { return slices.Collect(maps.Keys(c.AuthInfos)) }))
	_ = c.RegisterFlagCompletionFunc("namespace", func(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
		return o.completeFromCluster(cmd, streams, func(ctx context.Context, c *watchclient.Client) ([]string, error) {
			return c.Namespaces(ctx)
		})
	})
	c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return o.completeArg(cmd, streams, args, toComplete)
	}
}

// completeArg completes RESOURCE as kubectl does, and further: the types
// of a comma-separated list (pods,con<TAB>: the types not in it yet, each
// after what is typed), and RESOURCE/NAME from the names of the objects in
// the namespace of -n or the kubeconfig context (cm/<TAB>, as kubectl get
// cm/<TAB>). A further argument completes another type (kwatch stream pods
// configmaps), unless one already names an object.
func (o *streamOptions) completeArg(cmd *cobra.Command, streams IOStreams, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	none := cobra.ShellCompDirectiveNoFileComp
	if o.raw != "" || slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, "/") }) {
		return nil, none
	}
	if resource, _, ok := strings.Cut(toComplete, "/"); ok {
		if len(args) > 0 || resource == "" || strings.Contains(resource, ",") || o.allNamespaces {
			return nil, none // an object is named alone, in one namespace
		}
		names, dir := o.completeFromCluster(cmd, streams, func(ctx context.Context, c *watchclient.Client) ([]string, error) {
			return c.Names(ctx, resource, *o.kube.Namespace)
		})
		var out []string
		for _, n := range names {
			if n := resource + "/" + n; strings.HasPrefix(n, toComplete) {
				out = append(out, n)
			}
		}
		return out, dir
	}
	types, dir := o.completeFromCluster(cmd, streams, func(ctx context.Context, c *watchclient.Client) ([]string, error) {
		return c.Watchable(ctx)
	})
	// pods,con<TAB>: each type not listed yet, after the list typed so
	// far; no space after it, so that another comma can follow.
	cut := strings.LastIndexByte(toComplete, ',')
	head, typed := toComplete[:cut+1], strings.Split(toComplete[:max(cut, 0)], ",")
	var out []string
	for _, t := range types {
		if c := head + t; strings.HasPrefix(c, toComplete) && !slices.Contains(typed, t) {
			out = append(out, c)
		}
	}
	if cut >= 0 {
		dir |= cobra.ShellCompDirectiveNoSpace
	}
	return out, dir
}

// setDirect notes whether a flag of connectionFlags was given, or
// $KUBECONFIG is set.
func (o *streamOptions) setDirect(cmd *cobra.Command, streams IOStreams) {
	for _, name := range connectionFlags {
		if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
			o.direct, o.directFlag = true, "--"+name
			return
		}
	}
	if streams.Getenv != nil && streams.Getenv("KUBECONFIG") != "" {
		o.direct, o.directFlag = true, "$KUBECONFIG"
	}
}

// proxyEnv names the environment variable kwatch stream takes its kubectl
// proxy from when --proxy is not given.
const proxyEnv = "KWATCH_PROXY"

// setProxy sets o.proxy from --proxy, or else from $KWATCH_PROXY when no
// flag asks to connect straight (a connection flag or --http2: flags win
// over the environment; $KUBECONFIG does not count, as with --proxy).
// --proxy "" leaves $KWATCH_PROXY out.
func (o *streamOptions) setProxy(cmd *cobra.Command, streams IOStreams) error {
	proxy, err := normalizeProxy(o.proxy, "--proxy")
	if err != nil {
		return err
	}
	o.proxy, o.proxyFrom = proxy, ""
	if cmd.Flags().Changed("proxy") || o.http2 || (o.direct && o.directFlag != "$KUBECONFIG") {
		return nil
	}
	if env := getenv(streams, proxyEnv); env != "" {
		if o.proxy, err = normalizeProxy(env, "$"+proxyEnv); err != nil {
			return err
		}
		o.proxyFrom = "from $" + proxyEnv
	}
	return nil
}

// proxyURL returns the kubectl proxy to go through: --proxy or
// $KWATCH_PROXY, or kubectl proxy's default port when it answers, no flag
// or $KUBECONFIG asked to connect straight and --http2 was not given; ""
// to connect straight.
func (o *streamOptions) proxyURL(ctx context.Context) string {
	// --http2 asks for a direct TLS connection: no proxy is picked for it.
	if o.proxy == "" && !o.direct && !o.http2 && watchclient.ProxyAnswers(ctx, watchclient.DefaultProxyURL, time.Second) {
		return watchclient.DefaultProxyURL
	}
	return o.proxy
}

// connectOptions says where and how to connect, for watchclient.Connect:
// through proxy, or straight from the kubeconfig (naming its context).
func (o *streamOptions) connectOptions(proxy string) watchclient.ConnectOptions {
	co := watchclient.ConnectOptions{ProxyURL: proxy, HTTP2: o.http2, UserAgent: "kwatch/" + version}
	co.ProxyFrom = o.proxyOrigin(proxy)
	if proxy == "" {
		co.ClientConfig = o.kube.ToRawKubeConfigLoader()
		co.ContextName = *o.kube.Context
		if raw, err := co.ClientConfig.RawConfig(); err == nil && co.ContextName == "" {
			co.ContextName = raw.CurrentContext
		}
	}
	return co
}

// proxyOrigin says where proxy (proxyURL's) came from when no flag gave it:
// $KWATCH_PROXY, or kubectl proxy's default address; "" for --proxy or no
// proxy.
func (o *streamOptions) proxyOrigin(proxy string) string {
	switch {
	case proxy == "":
		return ""
	case proxy == o.proxy:
		return o.proxyFrom
	}
	return "the default address"
}

// completeFromCluster connects as kwatch stream would (the flags given so
// far, or kubectl proxy's default port when it answers) and returns what
// list gives, within a few seconds; nothing when the cluster cannot be
// reached (completion must not hang or print errors).
func (o *streamOptions) completeFromCluster(cmd *cobra.Command, streams IOStreams,
	list func(context.Context, *watchclient.Client) ([]string, error)) ([]string, cobra.ShellCompDirective) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	o.setDirect(cmd, streams)
	if err := o.setProxy(cmd, streams); err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	client, err := watchclient.Connect(o.connectOptions(o.proxyURL(ctx)), record.SinkFunc(func(record.Record) {}))
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	names, err := list(ctx, client)
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// normalizeProxy accepts kubectl proxy's address as HOST:PORT (as kubectl
// proxy prints it: "Starting to serve on 127.0.0.1:8001") or as a URL;
// from names where it was given, for the error.
func normalizeProxy(p, from string) (string, error) {
	if p == "" {
		return "", nil
	}
	if !strings.Contains(p, "://") {
		p = "http://" + p
	}
	u, err := url.Parse(p)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return "", fmt.Errorf("%s %q: want kubectl proxy's address, HOST:PORT or http://HOST:PORT (e.g. 127.0.0.1:8001)", from, p)
	}
	return strings.TrimSuffix(p, "/"), nil
}

func (o *streamOptions) complete(cmd *cobra.Command, args []string, streams IOStreams) error {
	if err := o.output.validate(); err != nil {
		return err
	}
	o.namespace = *o.kube.Namespace
	o.setDirect(cmd, streams)
	if err := o.setProxy(cmd, streams); err != nil {
		return err
	}
	switch {
	case o.raw != "" && len(args) > 0:
		return fmt.Errorf("give either RESOURCE or --raw, not both")
	case o.raw == "" && len(args) == 0:
		return fmt.Errorf("say what to watch: RESOURCE[/NAME] (e.g. configmaps) or --raw PATH")
	case o.raw != "" && !strings.HasPrefix(o.raw, "/"):
		return fmt.Errorf("--raw takes a path starting with /, e.g. /api/v1/namespaces/default/configmaps?watch=1")
	}
	var types []string
	for _, a := range args {
		types = append(types, strings.Split(a, ",")...)
	}
	if len(types) == 1 {
		var slash bool
		o.resource, o.name, slash = strings.Cut(types[0], "/")
		if o.resource == "" || strings.Contains(o.name, "/") || (slash && o.name == "") {
			return fmt.Errorf("%q: want RESOURCE or RESOURCE/NAME, e.g. configmaps or cm/coredns", args[0])
		}
	} else if len(types) > 1 {
		for _, t := range types {
			if t == "" {
				return fmt.Errorf("%q: an empty resource type (a comma too many?); give types separated by commas, e.g. pods,configmaps", strings.Join(args, " "))
			}
			if strings.Contains(t, "/") {
				return fmt.Errorf("%q: with several resource types, give types only (e.g. pods,configmaps), no NAME", strings.Join(args, " "))
			}
		}
		if o.resourceVersion != "" {
			return fmt.Errorf("--resource-version belongs to one resource type; watch several types without it")
		}
		o.resources, o.resource = types, types[0]
	}
	explicit := cmd.Flags().Changed("list-mode")
	switch {
	case o.listMode != "list" && o.listMode != "watch-list":
		return fmt.Errorf("--list-mode %q: want list or watch-list", o.listMode)
	case explicit && o.listMode == "watch-list" && o.watchOnly:
		return fmt.Errorf("--watch-only hides the objects of a LIST; with --list-mode watch-list they are the watch's first events: leave one of them out")
	case explicit && o.listMode == "watch-list" && (o.raw != "" || o.resourceVersion != ""):
		return fmt.Errorf("--list-mode watch-list gets the current state; --raw and --resource-version watch from a given point without it")
	case o.watchOnly:
		o.listMode = "list" // kubectl's --watch-only: list, show only the changes
	}
	if o.raw != "" && (o.selector != "" || o.fieldSelector != "" || o.namespace != "" || o.allNamespaces) {
		return fmt.Errorf("--raw watches its path as given: put selectors and the namespace in the path instead of -l, --field-selector, -n or -A")
	}
	if o.allNamespaces {
		// As kubectl: --all-namespaces wins over --namespace.
		o.namespace = ""
	}
	if o.allNamespaces && o.name != "" {
		return fmt.Errorf("RESOURCE/NAME needs one namespace, not --all-namespaces")
	}
	if o.proxy != "" && o.direct && o.directFlag != "$KUBECONFIG" {
		return fmt.Errorf("--proxy goes through kubectl proxy, which brings its own server and credentials; %s connects straight: choose one", o.directFlag)
	}
	if o.proto && o.cbor {
		return fmt.Errorf("--proto and --cbor each choose the watch's encoding: give one of them")
	}
	if o.http2 && o.proxy != "" {
		return fmt.Errorf("--http2 applies to a direct TLS connection, not to kubectl proxy")
	}
	if o.record != "" && o.raw != "" && !o.output.ShowSecrets && event.SecretsPath(o.raw) {
		return errRecordSecrets
	}
	if _, err := labels.Parse(o.selector); err != nil {
		return fmt.Errorf("--selector %q: %v", o.selector, err)
	}
	if _, err := fields.ParseSelector(o.fieldSelector); err != nil {
		return fmt.Errorf("--field-selector %q: %v", o.fieldSelector, err)
	}
	if o.bookmarkTimeout < 0 {
		return fmt.Errorf("--bookmark-timeout must not be negative")
	}
	if o.idleTimeout < 0 {
		return fmt.Errorf("--idle-timeout must not be negative")
	}
	// Parsed as client-go will parse it (whole seconds or a duration).
	if d, err := clientcmd.ParseTimeout(*o.kube.Timeout); err != nil || d < 0 {
		return fmt.Errorf("--request-timeout %q: want a duration such as 10s or 1m (0: never)", *o.kube.Timeout)
	}
	if o.timeout < 0 || o.timeout%time.Second != 0 {
		return fmt.Errorf("--timeout is sent as whole seconds (timeoutSeconds): give e.g. 5s or 1m, not %s", o.timeout)
	}
	return nil
}

// connectHint adds to err what to check when kwatch could not reach the
// API server or was refused (watchclient.Explain).
func (o *streamOptions) connectHint(err error, proxy, server string) error {
	return watchclient.Explain(err, o.target(proxy, server))
}

// target says where the run connects (proxy, or straight to server) and
// with which flags, for watchclient.Explain and ExplainConnect.
func (o *streamOptions) target(proxy, server string) watchclient.Target {
	k := o.kube
	return watchclient.Target{Proxy: proxy, ProxyFrom: o.proxyOrigin(proxy), Server: server, HTTP2: o.http2, Direct: o.direct,
		DefaultServer: func() bool {
			raw, err := k.ToRawKubeConfigLoader().RawConfig()
			return err == nil && len(raw.Clusters) == 0 && *k.APIServer == ""
		},
		Credentials: watchclient.Credentials{Kubeconfig: *k.KubeConfig, Context: *k.Context,
			Token: *k.BearerToken != "", ClientCertificate: *k.CertFile != "", User: *k.AuthInfoName != ""}}
}

// setupError turns an error of resolving what to watch (watchOptions,
// resolveForRecord) into kwatch's exit error: 1, with what to check.
func (o *streamOptions) setupError(err error, proxy, server string) error {
	return &exitError{code: ExitProblems, err: o.connectHint(err, proxy, server)}
}

// watchOptions resolves resource (unless --raw) and returns the options
// of its list-watch.
func (o *streamOptions) watchOptions(ctx context.Context, client *watchclient.Client, sink record.Sink, resource string) (watchclient.WatchOptions, error) {
	wo := watchclient.WatchOptions{Raw: o.raw, Name: o.name, LabelSelector: o.selector,
		FieldSelector: o.fieldSelector, ResourceVersion: o.resourceVersion, Proto: o.proto, CBOR: o.cbor,
		TimeoutSeconds: int64(o.timeout / time.Second), IdleTimeout: o.idleTimeout, QuietAfter: o.bookmarkTimeout,
		ShowList: !o.watchOnly, ListObjects: o.output.Diff || o.output.DiffAll || !o.watchOnly,
		WatchList: o.listMode == "watch-list"}
	if o.raw != "" {
		return wo, nil
	}
	res, ok := o.resolved[resource]
	if !ok {
		// Discovery is retried while the server answers 429 or 5xx, as
		// LIST and WATCH are; other errors and Ctrl-C end it.
		var err error
		if res, err = client.ResolveRetrying(ctx, resource, sink, watchclient.DiscoveryBackoff()); err != nil {
			return wo, err
		}
	}
	wo.Resource = res
	if res.Namespaced && !o.allNamespaces {
		wo.Namespace = o.namespace
		if wo.Namespace == "" {
			wo.Namespace = client.Namespace
		}
		if wo.Namespace == "" {
			wo.Namespace = "default"
		}
	}
	wo.AllNamespaces = res.Namespaced && o.allNamespaces
	return wo, nil
}

// runMany watches several resource types at once (kwatch stream
// pods,configmaps): one list-watch each, each with its own tapped
// connections, all printed to one output with one connection numbering,
// and one summary. The first that fails for good ends the run (exit 1)
// after the others are stopped.
func (o *streamOptions) runMany(ctx context.Context, s streamSession, co watchclient.ConnectOptions) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	shared := &syncSink{s: s.sink}
	s.sink = shared
	co.ConnIDs, co.WatchNumbers = new(atomic.Int64), new(atomic.Int64)
	type run struct {
		client *watchclient.Client
		wo     watchclient.WatchOptions
		stats  *watchclient.Stats
		err    error
		own    bool // err came before the run was stopped: it failed for good
	}
	runs := make([]*run, len(o.resources))
	server := ""
	// Over HTTP/2 the watches share one client, so one connection, its
	// streams, as client-go's informers do (an --idle-timeout then judges
	// that connection's activity); over HTTP/1.1 each has its own client,
	// connections and idle watchdog.
	var one *watchclient.Client
	closeAll := func() {
		for _, r := range runs {
			if r != nil && r.client != one {
				r.client.Close()
			}
		}
		if one != nil {
			one.Close()
		}
	}
	for i, r := range o.resources {
		client := one
		if client == nil {
			c, err := watchclient.Connect(co, shared)
			if err != nil {
				closeAll()
				return &exitError{code: ExitUsage, err: err}
			}
			client = c
			if o.http2 {
				one = c
			}
		}
		server = client.Config.Host
		wo, err := o.watchOptions(ctx, client, shared, r)
		if err != nil {
			if client != one {
				client.Close()
			}
			closeAll()
			return o.setupError(fmt.Errorf("%s: %w", r, err), s.proxy, server)
		}
		runs[i] = &run{client: client, wo: wo}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Go(func() {
			r.stats, r.err = watchclient.Run(ctx, r.client, r.wo)
			if r.err != nil && ctx.Err() == nil {
				r.own = true
				cancel() // one watch failed for good: end the others
			}
		})
	}
	wg.Wait()
	failed := slices.ContainsFunc(runs, func(r *run) bool { return r.own })
	sum := &record.Summary{Time: time.Now(), Live: true, Duration: time.Since(start)}
	var errs []error
	closeAll()
	counted := map[*watchclient.Client]bool{}
	for _, r := range runs {
		if r.stats != nil {
			sum.WatchesRequested += r.stats.Watches
			sum.WatchesOpened += r.stats.Opened
			sum.Relists += r.stats.Relists
			sum.Retries += r.stats.Retries
		}
		if !counted[r.client] {
			counted[r.client] = true
			sum.Bytes += r.client.WireBytes()
		}
		// A watch stopped because another failed, before the server
		// answered it, did not fail itself: only the other is the error.
		stopped := failed && !r.own && watchclient.Unanswered(r.err, r.stats)
		if r.err != nil && !stopped {
			errs = append(errs, fmt.Errorf("%s: %w", r.wo.Resource.GVR.Resource, r.err))
		}
	}
	return o.end(s, sum, errors.Join(errs...), server)
}

// streamSession is what a run of kwatch stream writes to: the printer,
// the sink of its records, the --record capture (nil without), and the
// kubectl proxy it goes through ("" for straight).
type streamSession struct {
	p     printer.Printer
	sink  record.Sink
	rec   *pcapwriter.Writer
	proxy string
}

// end ends a run of kwatch stream, one resource type or several: it emits
// the run's summary, closes the output, writes the report and returns the
// exit error: output that could not be written (2), a --record file that
// could not be written (1), the run's error with what to check (1); nil
// for exit 0 (runErr nil).
func (o *streamOptions) end(s streamSession, sum *record.Summary, runErr error, server string) error {
	s.sink.Emit(sum)
	closeErr := s.p.Close()
	// The report does not depend on stdout: written even when it failed.
	if err := o.output.writeReport(); err != nil {
		return err
	}
	if closeErr != nil {
		return &exitError{code: ExitUsage, err: fmt.Errorf("writing output: %w", closeErr)}
	}
	if s.rec != nil && s.rec.Err() != nil {
		return &exitError{code: ExitProblems, err: fmt.Errorf("--record %s: %w", o.record, s.rec.Err())}
	}
	if runErr != nil {
		return &exitError{code: ExitProblems, err: o.connectHint(runErr, s.proxy, server)}
	}
	return nil
}

// syncSink serialises the records of several Clients into one sink.
type syncSink struct {
	mu sync.Mutex
	s  record.Sink
}

// Emit passes r on.
func (s *syncSink) Emit(r record.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.s.Emit(r)
}

// Flush flushes the sink (record.Flusher).
func (s *syncSink) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	record.Flush(s.s)
}

// keyLogFile appends TLS key log lines to a file opened at the first line
// (a run stopped before any TLS connection leaves none behind), created
// like the key logs curl and Python write: for its owner only. A file that
// cannot be opened or written is said once on errOut; the watch goes on.
type keyLogFile struct {
	path   string
	errOut io.Writer
	mu     sync.Mutex
	f      *os.File
	failed bool
}

func (k *keyLogFile) Write(p []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.failed {
		return 0, errKeyLog
	}
	var err error
	if k.f == nil {
		k.f, err = os.OpenFile(k.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	}
	if err == nil {
		_, err = k.f.Write(p)
	}
	if err != nil {
		k.failed = true
		fmt.Fprintf(k.errOut, "kwatch: --tls-keylog: %v; no more keys are written\n", err)
		return 0, err
	}
	return len(p), nil
}

// Close closes the file, if it was opened.
func (k *keyLogFile) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.f == nil {
		return nil
	}
	return k.f.Close()
}

var errKeyLog = errors.New("the key log could not be written")

// keyLogPath is where the TLS keys go: --tls-keylog, else SSLKEYLOGFILE as
// curl and Python honour it; "" for nowhere.
func (o *streamOptions) keyLogPath(streams IOStreams) string {
	if o.tlsKeylog != "" {
		return o.tlsKeylog
	}
	return getenv(streams, "SSLKEYLOGFILE")
}

// describe says what the session watches, for the report's title:
// "configmaps -n kube-system", "pods,configmaps -A", "--raw PATH".
func (o *streamOptions) describe() string {
	if o.raw != "" {
		return "--raw " + o.raw
	}
	what := o.resource
	if len(o.resources) > 1 {
		what = strings.Join(o.resources, ",")
	} else if o.name != "" {
		what += "/" + o.name
	}
	switch {
	case o.allNamespaces:
		what += " -A"
	case o.namespace != "":
		what += " -n " + o.namespace
	}
	return what
}

// errRecordSecrets refuses to record a watch of Secrets without
// --show-secrets: the recording holds the bytes as received, where kwatch's
// output would redact them.
var errRecordSecrets = fmt.Errorf("--record writes the watch's bytes as received, Secret data included; pass --show-secrets as well to record a watch of Secrets")

// recordSecretsError refuses --record of a run whose types (all of them)
// include secrets (the arguments that named them), saying what to do.
func recordSecretsError(secrets, types []string) error {
	if len(types) == 1 {
		return errRecordSecrets
	}
	rest := slices.DeleteFunc(slices.Clone(types), func(t string) bool { return slices.Contains(secrets, t) })
	return fmt.Errorf("%s: --record writes the watch's bytes as received, Secret data included; pass --show-secrets as well to record a watch of Secrets, or record the others alone (%s)",
		strings.Join(secrets, ","), strings.Join(rest, ","))
}

// resolveForRecord resolves the resource types before the --record file
// is opened when Secrets may not be recorded (no --show-secrets), so that
// a run that watches Secrets is refused before anything is written or said
// (its warning that a .pcapng holds the keys included). It keeps what it
// resolved for watchOptions, and returns the exit error of a type that does
// not resolve, as the run would.
func (o *streamOptions) resolveForRecord(ctx context.Context, co watchclient.ConnectOptions, sink record.Sink, proxy string) error {
	if o.record == "" || o.output.ShowSecrets || o.raw != "" {
		return nil
	}
	types := o.resources
	if len(types) == 0 {
		types = []string{o.resource}
	}
	client, err := watchclient.Connect(co, sink)
	if err != nil {
		return &exitError{code: ExitUsage, err: watchclient.ExplainConnect(err, o.target(proxy, ""))}
	}
	defer client.Close()
	o.resolved = map[string]watchclient.Resource{}
	var secrets []string
	for _, t := range types {
		res, err := client.ResolveRetrying(ctx, t, sink, watchclient.DiscoveryBackoff())
		if err != nil {
			if len(types) > 1 {
				err = fmt.Errorf("%s: %w", t, err)
			}
			return o.setupError(err, proxy, client.Config.Host)
		}
		o.resolved[t] = res
		if res.CoreSecrets() {
			secrets = append(secrets, t)
		}
	}
	if len(secrets) > 0 {
		return &exitError{code: ExitUsage, err: recordSecretsError(secrets, types)}
	}
	return nil
}

func (o *streamOptions) run(ctx context.Context, cmd *cobra.Command, streams IOStreams) error {
	// Every exchange on a tapped connection is one kwatch asked for: show
	// them all, watch or not (e.g. a 403, or a --raw path that is no watch).
	p := o.output.printer(streams, true)
	o.output.ReportTitle = "kwatch stream " + o.describe()
	sink := o.output.sink(p, false)
	proxy := o.proxyURL(ctx)
	co := o.connectOptions(proxy)
	co.Warnings = streams.ErrOut
	if path := o.keyLogPath(streams); path != "" {
		kl := &keyLogFile{path: path, errOut: streams.ErrOut}
		defer kl.Close()
		co.KeyLog = kl
	}
	co.DisableCompression = o.kube.DisableCompression != nil && *o.kube.DisableCompression
	co.HTTP = wire.Options{Limits: exchange.Limits{MaxEventBytes: o.output.MaxEventBytes, MaxInflatedBytes: o.output.MaxInflatedBytes,
		Decode: event.DecodeOptions{ShowSecrets: o.output.ShowSecrets}}, HTTP2Frames: o.output.Frames}
	if err := o.resolveForRecord(ctx, co, sink, proxy); err != nil {
		return err
	}
	rec, f, err := o.openRecord()
	if err != nil {
		return err
	}
	if f != nil {
		defer f.Close()
	}
	co.Record = rec
	if rec != nil && rec.PCAPNG() && proxy == "" {
		fmt.Fprintf(streams.ErrOut, "kwatch: %s holds the TLS keys of the watch connections: anyone with the file can decrypt them, bearer token included\n", o.record)
	}
	client, err := watchclient.Connect(co, sink)
	if err != nil {
		return &exitError{code: ExitUsage, err: watchclient.ExplainConnect(err, o.target(proxy, ""))}
	}
	s := streamSession{p: p, sink: sink, rec: rec, proxy: proxy}
	if len(o.resources) > 1 {
		client.Close()
		return o.runMany(ctx, s, co)
	}
	server := client.Config.Host
	wo, err := o.watchOptions(ctx, client, sink, o.resource)
	if err != nil {
		return o.setupError(err, proxy, server)
	}
	start := time.Now()
	stats, runErr := watchclient.Run(ctx, client, wo)
	client.Close()
	return o.end(s, &record.Summary{Time: time.Now(), Live: true, WatchesRequested: stats.Watches,
		WatchesOpened: stats.Opened, Relists: stats.Relists, Retries: stats.Retries,
		Bytes: client.WireBytes(), Duration: time.Since(start)}, runErr, server)
}

// openRecord creates the --record capture file, a pcapng when its name
// ends in .pcapng, else a pcap; nil, nil without --record. The caller
// closes f once the run is over.
func (o *streamOptions) openRecord() (rec *pcapwriter.Writer, f *os.File, err error) {
	if o.record == "" {
		return nil, nil, nil
	}
	// Like a kubeconfig, a recording is for its owner's eyes: it holds
	// the objects as the server sent them.
	f, err = os.OpenFile(o.record, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, nil, &exitError{code: ExitUsage, err: err}
	}
	newWriter := pcapwriter.New
	if strings.HasSuffix(strings.ToLower(o.record), ".pcapng") {
		// TLS connections are recorded as they travelled, with
		// their keys in the file.
		newWriter = pcapwriter.NewNg
	}
	if rec, err = newWriter(f); err != nil {
		f.Close()
		return nil, nil, &exitError{code: ExitUsage, err: fmt.Errorf("%s: %w", o.record, err)}
	}
	return rec, f, nil
}
