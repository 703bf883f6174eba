// Package filter decides which watches kwatch pcap and kwatch attach show:
// by the User-Agent of their request (--user-agent), and by the resource
// and namespace it watches (--resource, -n), read from the request's path
// as kube-apiserver reads it (k8s.io/apiserver's RequestInfoFactory).
// Options judge a request on its own fields, which the protocol followers
// ask before they frame a response body into events (exchange.Limits.Omit:
// a watch left out is never decoded); Stage is the record sink that drops
// the records of what was left out, judging a watch whose request was not
// seen (a capture, or an attach, that joined a connection mid-way) by its
// connection and its events, and counts what it dropped in the run's
// summary (record.LeftOut). The connection filters (--client, --server,
// --port) are the sources' (pcap.Options): a connection they leave out is
// never decoded either.
package filter

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/kwatch/kwatch/pkg/record"
)

// Options are the filters on what a run shows. The zero value keeps
// everything.
type Options struct {
	// UserAgent keeps the exchanges whose User-Agent header holds it, in
	// any letter case (kube-controller-manager, kubectl/v1.37); "" keeps
	// all.
	UserAgent string
	// Resource keeps the exchanges of that resource (its Name unset keeps
	// all).
	Resource Resource
	// Namespace keeps the exchanges whose path is in that namespace
	// (/namespaces/NS/…, as RequestInfo.Namespace has it); "" keeps all.
	// A watch of all namespaces is not in one: it costs the server, and
	// shows its client, the whole cluster's objects of its resource.
	Namespace string
}

// Active reports whether o leaves anything out.
func (o Options) Active() bool {
	return o.UserAgent != "" || o.Resource.Name != "" || o.Namespace != ""
}

// String gives the filters as the command line does: "--user-agent
// kubectl --resource configmaps -n demo".
func (o Options) String() string {
	var f []string
	if o.UserAgent != "" {
		f = append(f, "--user-agent "+o.UserAgent)
	}
	if o.Resource.Name != "" {
		f = append(f, "--resource "+o.Resource.String())
	}
	if o.Namespace != "" {
		f = append(f, "-n "+o.Namespace)
	}
	return strings.Join(f, " ")
}

// Resource is a resource as kubectl names one on its command line:
// RESOURCE[.VERSION][.GROUP] ("configmaps", "deployments.apps",
// "deployments.v1.apps"), parsed by apimachinery's schema.ParseResourceArg.
type Resource struct {
	// Name is the resource's plural name, e.g. "deployments".
	Name string
	// Group is the API group named after it; "" when none was named,
	// which matches the resource in every group, as kubectl finds it in
	// discovery (configmaps: the core group; deployments: apps).
	Group string
	// VersionGroup and Version are, for a name of three or more parts,
	// the group and version they may also be: kubectl reads
	// deployments.v1.apps as version v1 of group apps, or as the group
	// v1.apps, whichever the server has.
	VersionGroup, Version string
	text                  string
}

// String returns the resource as it was given.
func (r Resource) String() string { return r.text }

// ParseResource parses a --resource value. Errors say what a resource
// looks like: a name that is not lowercase, that names an object
// (configmaps/NAME), or that is a built-in kind's singular (configmap: the
// API's resources are plural) is refused. Short names (cm, deploy) come
// from a cluster's discovery, which a capture does not have: they match
// nothing.
func ParseResource(s string) (Resource, error) {
	if s == "" {
		return Resource{}, fmt.Errorf("name a resource, e.g. configmaps or deployments.apps")
	}
	if strings.Contains(s, "/") {
		return Resource{}, fmt.Errorf("%q: give the resource alone, as kubectl names it (configmaps, deployments.apps), not RESOURCE/NAME", s)
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return Resource{}, fmt.Errorf("%q: a resource is named in lowercase, in the plural, with its group after a dot (configmaps, deployments.apps), as kubectl and the API's paths name it", s)
		}
	}
	gvr, gr := schema.ParseResourceArg(s)
	if gr.Resource == "" {
		return Resource{}, fmt.Errorf("%q: no resource before the group; e.g. deployments.apps", s)
	}
	if plural, ok := singulars()[gr.Resource]; ok {
		return Resource{}, fmt.Errorf("%q: resources are plural, as the API's paths name them: %s", s, strings.Replace(s, gr.Resource, plural, 1))
	}
	r := Resource{Name: gr.Resource, Group: gr.Group, text: s}
	if gvr != nil {
		r.VersionGroup, r.Version = gvr.Group, gvr.Version
	}
	return r, nil
}

// singulars maps the lowercase kind of each type of client-go's scheme (the
// built-in API) that is not its resource's name to that name, the kind's
// plural as apimachinery's RESTMapper guesses it: configmap → configmaps.
// A kind whose lowercase form ends in "s" is left out: it may be its own
// plural (Endpoints).
func singulars() map[string]string {
	m := map[string]string{}
	for gvk := range scheme.Scheme.AllKnownTypes() {
		k := strings.ToLower(gvk.Kind)
		if strings.HasSuffix(k, "s") || strings.HasSuffix(k, "list") || strings.HasSuffix(k, "options") {
			continue
		}
		plural, _ := meta.UnsafeGuessKindToResource(gvk)
		m[k] = plural.Resource
	}
	return m
}

// matches reports whether r is the resource of group, version and name.
func (r Resource) matches(group, version, name string) bool {
	switch {
	case r.Name == "":
		return true
	case name != r.Name:
		return false
	case r.Group == "", group == r.Group:
		return true
	}
	return r.VersionGroup != "" && group == r.VersionGroup && version == r.Version
}

// matchesKind reports whether r is the resource of an object of apiVersion
// and kind, as a watch's event names it: the kind's plural as
// apimachinery's RESTMapper guesses it (ConfigMap: configmaps, Ingress:
// ingresses, NetworkPolicy: networkpolicies), or the kind itself when it
// is plural already (Endpoints: endpoints).
func (r Resource) matchesKind(apiVersion, kind string) bool {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil || kind == "" {
		return false
	}
	plural, _ := meta.UnsafeGuessKindToResource(gv.WithKind(kind))
	return r.matches(gv.Group, gv.Version, plural.Resource) || r.matches(gv.Group, gv.Version, strings.ToLower(kind))
}

// resourceOfKind names the resource of objects of apiVersion and kind as
// matchesKind reads them: "leases.coordination.k8s.io", "configmaps".
func resourceOfKind(apiVersion, kind string) string {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return strings.ToLower(kind)
	}
	plural, _ := meta.UnsafeGuessKindToResource(gv.WithKind(kind))
	if gv.Group == "" {
		return plural.Resource
	}
	return plural.Resource + "." + gv.Group
}

// ValidateNamespace says what is wrong with a -n value: a namespace is a
// DNS label (RFC 1123), as the API server requires.
func ValidateNamespace(ns string) error {
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return fmt.Errorf("%q is not a namespace name: %s", ns, strings.Join(errs, "; "))
	}
	return nil
}

// Verdict is what the filters say of an exchange.
type Verdict uint8

// The verdicts.
const (
	// Keep: it matches every filter.
	Keep Verdict = iota
	// Leave: it does not match a filter.
	Leave
	// NotKnown: what a filter asks was not seen (the request, its
	// path, or its User-Agent: an HPACK entry from before the join).
	NotKnown
)

// Judge says whether the exchange that req opens matches the filters, from
// the request's own fields: its User-Agent header, and its path as
// kube-apiserver reads it. A request that asks for nothing that is a
// resource (/healthz, /apis discovery) is left out by --resource and -n.
// NotKnown: what a filter asks is not in req (req nil: not seen; its path,
// or its User-Agent, among the HPACK entries from before the join).
func (o Options) Judge(req *record.Request) Verdict {
	return combine(o.judgeAgent(req), o.judgePath(req))
}

// Omit is exchange.Limits.Omit: whether the request's own fields leave the
// exchange out, so that its response body is not framed into events.
func (o Options) Omit(req *record.Request) bool {
	return req != nil && o.Judge(req) == Leave
}

// combine is the verdict of two filters: one that does not match leaves
// the exchange out whatever the other says.
func combine(a, b Verdict) Verdict {
	switch {
	case a == Leave || b == Leave:
		return Leave
	case a == NotKnown || b == NotKnown:
		return NotKnown
	}
	return Keep
}

// agentOf returns the User-Agent of req, and whether it is known: a
// request whose header section has none, every field of it known, has
// none ("", true).
func agentOf(req *record.Request) (string, bool) {
	if req == nil {
		return "", false
	}
	if vs := req.Header["User-Agent"]; len(vs) > 0 {
		return vs[0], true
	}
	return "", len(req.Unknown) == 0
}

func (o Options) judgeAgent(req *record.Request) Verdict {
	if o.UserAgent == "" {
		return Keep
	}
	ua, ok := agentOf(req)
	switch {
	case !ok:
		return NotKnown
	case containsFold(ua, o.UserAgent):
		return Keep
	}
	return Leave
}

func (o Options) judgePath(req *record.Request) Verdict {
	if o.Resource.Name == "" && o.Namespace == "" {
		return Keep
	}
	if req == nil || req.Target == "" {
		return NotKnown
	}
	info := requestInfo(req)
	if info == nil || !info.IsResourceRequest {
		return Leave
	}
	if !o.Resource.matches(info.APIGroup, info.APIVersion, info.Resource) {
		return Leave
	}
	if o.Namespace != "" && info.Namespace != o.Namespace {
		return Leave
	}
	return Keep
}

// infoFactory reads a request's path as kube-apiserver does (its
// --api-prefixes: /api, groupless, and /apis).
var infoFactory = request.RequestInfoFactory{
	APIPrefixes:          map[string]sets.Empty{"api": {}, "apis": {}},
	GrouplessAPIPrefixes: map[string]sets.Empty{"api": {}},
}

// requestInfo reads req's target as kube-apiserver reads a request's path
// and query: nil when the target is not a path.
func requestInfo(req *record.Request) *request.RequestInfo {
	u, err := url.ParseRequestURI(req.Target)
	if err != nil {
		return nil
	}
	info, err := infoFactory.NewRequestInfo(&http.Request{Method: req.Method, URL: u})
	if err != nil {
		return nil
	}
	return info
}

// containsFold reports whether s holds sub, in any letter case (ASCII).
func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}
