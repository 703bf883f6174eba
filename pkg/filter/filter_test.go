package filter

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/kwatch/kwatch/pkg/record"
)

func TestParseResource(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Resource
		err  string
	}{
		{in: "configmaps", want: Resource{Name: "configmaps"}},
		{in: "deployments.apps", want: Resource{Name: "deployments", Group: "apps"}},
		{in: "deployments.v1.apps", want: Resource{Name: "deployments", Group: "v1.apps", VersionGroup: "apps", Version: "v1"}},
		{in: "leases.coordination.k8s.io", want: Resource{Name: "leases", Group: "coordination.k8s.io", VersionGroup: "k8s.io", Version: "coordination"}},
		{in: "endpoints", want: Resource{Name: "endpoints"}},
		{in: "configmap", err: `"configmap": resources are plural, as the API's paths name them: configmaps`},
		{in: "deployment.apps", err: `"deployment.apps": resources are plural, as the API's paths name them: deployments.apps`},
		{in: "ConfigMap", err: `"ConfigMap": a resource is named in lowercase`},
		{in: "configmaps/kube-root-ca.crt", err: "not RESOURCE/NAME"},
		{in: ".apps", err: "no resource before the group"},
	} {
		got, err := ParseResource(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want one with %q", tc.in, err, tc.err)
			}
			continue
		}
		tc.want.text = tc.in
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func req(method, target, agent string) *record.Request {
	r := &record.Request{Method: method, Target: target, Header: map[string][]string{}, Watch: strings.Contains(target, "watch=")}
	if agent != "" {
		r.Header["User-Agent"] = []string{agent}
	}
	return r
}

// TestJudge: requests judged on their own fields, their paths read as
// kube-apiserver reads them.
func TestJudge(t *testing.T) {
	const kcm = "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abcdef0/shared-informers"
	mustResource := func(s string) Resource {
		r, err := ParseResource(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	unknownUA := req("GET", "/api/v1/namespaces/demo/configmaps?watch=true", "")
	unknownUA.Unknown = []record.UnknownField{{Position: 3, Index: 64, ValueBytes: -1}}
	unknownPath := req("GET", "", kcm)
	unknownPath.Unknown = []record.UnknownField{{Position: 1, Index: 70, ValueBytes: -1}}
	for _, tc := range []struct {
		name string
		opt  Options
		req  *record.Request
		want Verdict
	}{
		{"nothing asked", Options{}, req("GET", "/healthz", ""), Keep},
		{"agent", Options{UserAgent: "kube-controller-manager"}, req("GET", "/api/v1/pods?watch=true", kcm), Keep},
		{"agent, any case", Options{UserAgent: "SHARED-informers"}, req("GET", "/api/v1/pods?watch=true", kcm), Keep},
		{"another agent", Options{UserAgent: "kubelet"}, req("GET", "/api/v1/pods?watch=true", kcm), Leave},
		{"no User-Agent sent", Options{UserAgent: "kubelet"}, req("GET", "/api/v1/pods?watch=true", ""), Leave},
		{"User-Agent an HPACK entry from before the join", Options{UserAgent: "kubelet"}, unknownUA, NotKnown},
		{"request not seen", Options{UserAgent: "kubelet"}, nil, NotKnown},
		{"core resource", Options{Resource: mustResource("configmaps")}, req("GET", "/api/v1/namespaces/demo/configmaps?watch=true", ""), Keep},
		{"deprecated watch path", Options{Resource: mustResource("configmaps"), Namespace: "demo"}, req("GET", "/api/v1/watch/namespaces/demo/configmaps/app", ""), Keep},
		{"another resource", Options{Resource: mustResource("configmaps")}, req("GET", "/api/v1/namespaces/demo/secrets?watch=true", ""), Leave},
		{"resource of any group", Options{Resource: mustResource("deployments")}, req("GET", "/apis/apps/v1/deployments?watch=true", ""), Keep},
		{"resource.group", Options{Resource: mustResource("deployments.apps")}, req("GET", "/apis/apps/v1/namespaces/x/deployments?watch=true", ""), Keep},
		{"another group", Options{Resource: mustResource("deployments.apps")}, req("GET", "/apis/extensions/v1beta1/deployments?watch=true", ""), Leave},
		{"resource.version.group", Options{Resource: mustResource("deployments.v1.apps")}, req("GET", "/apis/apps/v1/deployments?watch=true", ""), Keep},
		{"another version", Options{Resource: mustResource("deployments.v1.apps")}, req("GET", "/apis/apps/v1beta2/deployments?watch=true", ""), Leave},
		{"core group is not apps", Options{Resource: mustResource("configmaps.apps")}, req("GET", "/api/v1/configmaps?watch=true", ""), Leave},
		{"not a resource", Options{Resource: mustResource("configmaps")}, req("GET", "/apis", ""), Leave},
		{"path not known", Options{Resource: mustResource("configmaps")}, unknownPath, NotKnown},
		{"namespace", Options{Namespace: "demo"}, req("GET", "/api/v1/namespaces/demo/configmaps?watch=true", ""), Keep},
		{"another namespace", Options{Namespace: "demo"}, req("GET", "/api/v1/namespaces/other/configmaps?watch=true", ""), Leave},
		{"all namespaces are not one", Options{Namespace: "demo"}, req("GET", "/api/v1/configmaps?watch=true", ""), Leave},
		{"cluster-scoped", Options{Namespace: "demo"}, req("GET", "/api/v1/nodes?watch=true", ""), Leave},
		{"a namespace's subresource", Options{Namespace: "demo"}, req("PUT", "/api/v1/namespaces/demo/finalize", ""), Keep},
		{"one that does not match beats one not known", Options{UserAgent: "kubelet", Resource: mustResource("secrets")}, unknownUA, Leave},
	} {
		if got := tc.opt.Judge(tc.req); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
		if omit := tc.opt.Omit(tc.req); omit != (tc.want == Leave) {
			t.Errorf("%s: Omit %v", tc.name, omit)
		}
	}
}

func TestMatchesKind(t *testing.T) {
	for _, tc := range []struct {
		resource, apiVersion, kind string
		want                       bool
	}{
		{"configmaps", "v1", "ConfigMap", true},
		{"endpoints", "v1", "Endpoints", true},
		{"ingresses.networking.k8s.io", "networking.k8s.io/v1", "Ingress", true},
		{"networkpolicies", "networking.k8s.io/v1", "NetworkPolicy", true},
		{"leases.coordination.k8s.io", "coordination.k8s.io/v1", "Lease", true},
		{"leases", "v1", "ConfigMap", false},
		{"deployments.apps", "extensions/v1beta1", "Deployment", false},
	} {
		r, err := ParseResource(tc.resource)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.matchesKind(tc.apiVersion, tc.kind); got != tc.want {
			t.Errorf("%s matches %s %s: %v", tc.resource, tc.apiVersion, tc.kind, got)
		}
	}
}

// stageRun passes recs through a Stage of opt and returns what came out.
func stageRun(opt Options, recs ...record.Record) ([]record.Record, *Stage) {
	var out []record.Record
	s := New(record.SinkFunc(func(r record.Record) { out = append(out, r) }), opt)
	for _, r := range recs {
		s.Emit(r)
	}
	return out, s
}

// TestStage: what is left out is dropped whole, and counted; what was not
// seen is judged by the connection and the events.
func TestStage(t *testing.T) {
	c := &record.Conn{ID: 1, Client: netip.MustParseAddrPort("127.0.0.1:40000"), Server: netip.MustParseAddrPort("127.0.0.1:6443"), HTTP2: true}
	const kcm = "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abcdef0"
	watch := func(ex int, target, agent string, events ...*record.Event) []record.Record {
		r := req("GET", target, agent)
		r.Conn, r.Exchange, r.Watch = c, ex, true
		recs := []record.Record{r, &record.Response{Conn: c, Exchange: ex, StatusCode: 200, Watch: true, Request: r}}
		for _, e := range events {
			e.Conn, e.Exchange = c, ex
			recs = append(recs, e)
		}
		return append(recs, &record.End{Conn: c, Exchange: ex, Watch: true},
			&record.Problem{Conn: c, Exchange: ex, Kind: record.KindCut, Warning: true})
	}
	// A stream whose request was not seen: its response and events.
	joined := func(ex int, events ...*record.Event) []record.Record {
		recs := []record.Record{&record.Response{Conn: c, Exchange: ex, StatusCode: 200, Watch: true, Inferred: true}}
		for _, e := range events {
			e.Conn, e.Exchange = c, ex
			recs = append(recs, e)
		}
		return append(recs, &record.End{Conn: c, Exchange: ex, Watch: true})
	}
	cm := func() *record.Event {
		return &record.Event{Type: "ADDED", APIVersion: "v1", Kind: "ConfigMap", Namespace: "demo", Name: "a"}
	}
	bookmark := func() *record.Event { return &record.Event{Type: "BOOKMARK", APIVersion: "v1", Kind: "ConfigMap"} }
	lease := func() *record.Event {
		return &record.Event{Type: "MODIFIED", APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Namespace: "kube-system", Name: "b"}
	}
	// A problem about the connection as a whole: said when something of
	// it is kept, else left out.
	skip := []record.Record{&record.Problem{Conn: c, Kind: "bytes before the first HTTP/2 frame", Warning: true}}
	process := &record.ConnNote{Conn: c, Kind: "process", Processes: []record.ConnProcess{{Role: "client", Name: "kube-controller-manager"}, {Role: "server", Name: "kube-apiserver"}}}
	all := func(parts ...[]record.Record) []record.Record {
		var out []record.Record
		for _, p := range parts {
			out = append(out, p...)
		}
		return append(out, &record.ConnNote{Conn: c, Kind: "closed"}, &record.Summary{})
	}
	mustResource := func(s string) Resource {
		r, _ := ParseResource(s)
		return r
	}
	for _, tc := range []struct {
		name string
		opt  Options
		recs []record.Record
		// kept are the exchanges whose records come out whole.
		kept []int
		left record.LeftOut
	}{
		{name: "by User-Agent",
			opt:  Options{UserAgent: "kube-controller-manager"},
			recs: all(skip, watch(1, "/api/v1/configmaps?watch=true", kcm, cm()), watch(3, "/api/v1/pods?watch=true", "kubelet/v1.37.2", cm())),
			kept: []int{1}, left: record.LeftOut{Watches: 1, Problems: 1}},
		{name: "a joined stream by the connection's other requests",
			opt:  Options{UserAgent: "kubelet"},
			recs: all(skip, watch(3, "/api/v1/pods?watch=true", kcm), joined(1, cm())),
			left: record.LeftOut{Watches: 2, Problems: 2}},
		{name: "a joined stream by its client process's name",
			opt:  Options{UserAgent: "kube-controller-manager"},
			recs: all([]record.Record{process}, joined(1, cm())),
			kept: []int{1}},
		{name: "a joined stream whose User-Agent is not known",
			opt:  Options{UserAgent: "shared-informers"},
			recs: all([]record.Record{process}, joined(1, cm())),
			left: record.LeftOut{Watches: 1, NotKnown: 1}},
		{name: "a joined stream by its first event's resource",
			opt:  Options{Resource: mustResource("configmaps")},
			recs: all(joined(1, cm()), joined(3, lease()), joined(5, bookmark(), cm())),
			kept: []int{1, 5}, left: record.LeftOut{Watches: 1}},
		{name: "a joined stream with no event",
			opt:  Options{Resource: mustResource("configmaps")},
			recs: all(joined(1)),
			left: record.LeftOut{Watches: 1, NotKnown: 1}},
		{name: "the namespace of a joined stream is not known",
			opt:  Options{Resource: mustResource("configmaps"), Namespace: "demo"},
			recs: all(joined(1, cm()), watch(3, "/api/v1/namespaces/demo/configmaps?watch=true", "", cm()), watch(5, "/api/v1/configmaps?watch=true", "", cm())),
			kept: []int{3}, left: record.LeftOut{Watches: 2, NotKnown: 1, Problems: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, s := stageRun(tc.opt, tc.recs...)
			seen := map[int]int{}
			var sum *record.Summary
			for _, r := range out {
				switch v := r.(type) {
				case *record.Request:
					seen[v.Exchange]++
				case *record.Response:
					seen[v.Exchange]++
				case *record.Event:
					seen[v.Exchange]++
				case *record.End:
					seen[v.Exchange]++
				case *record.Summary:
					sum = v
				}
			}
			want := map[int]int{}
			for _, ex := range tc.kept {
				for _, r := range tc.recs {
					switch v := r.(type) {
					case *record.Request:
						if v.Exchange == ex {
							want[ex]++
						}
					case *record.Response:
						if v.Exchange == ex {
							want[ex]++
						}
					case *record.Event:
						if v.Exchange == ex {
							want[ex]++
						}
					case *record.End:
						if v.Exchange == ex {
							want[ex]++
						}
					}
				}
			}
			if !reflect.DeepEqual(seen, want) {
				t.Errorf("records out by exchange %v, want %v", seen, want)
			}
			connProblems := func(recs []record.Record) int {
				n := 0
				for _, r := range recs {
					if p, ok := r.(*record.Problem); ok && p.Exchange == 0 {
						n++
					}
				}
				return n
			}
			if got, in := connProblems(out), connProblems(tc.recs); len(tc.kept) > 0 && got != in || len(tc.kept) == 0 && got != 0 {
				t.Errorf("%d problems about the connection out of %d", got, in)
			}
			if sum == nil || sum.LeftOut == nil || *sum.LeftOut != tc.left {
				t.Errorf("summary's LeftOut %+v, want %+v", sum.LeftOut, tc.left)
			}
			if l := s.LeftOut(); l != tc.left {
				t.Errorf("LeftOut() %+v, want %+v", l, tc.left)
			}
		})
	}
}

// TestStageNotDecrypted: the problem that a connection could not be
// decrypted passes the filters, whatever they keep: the printer counts the
// connection among those not decrypted, as without filters; it is not a
// problem about what the filters left out.
func TestStageNotDecrypted(t *testing.T) {
	c := &record.Conn{ID: 4}
	noKey := &record.Problem{Conn: c, Kind: record.KindNoTLSKey, Warning: true}
	out, s := stageRun(Options{UserAgent: "kubectl"}, noKey, &record.ConnNote{Conn: c, Kind: "closed"}, &record.Summary{})
	if len(out) != 3 || out[0] != noKey {
		t.Errorf("records out: %v, want the problem, the note and the summary", out)
	}
	if l := s.LeftOut(); l != (record.LeftOut{}) {
		t.Errorf("LeftOut() %+v, want nothing", l)
	}
}

// TestUnmatched: a run whose filters kept no watch says what they left out.
func TestUnmatched(t *testing.T) {
	c := &record.Conn{ID: 1}
	r := req("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases?watch=true", "kube-scheduler/v1.37.2 (linux/amd64) kubernetes/abc")
	r.Conn, r.Exchange = c, 1
	res, _ := ParseResource("configmaps")
	_, s := stageRun(Options{Resource: res, Namespace: "demo"}, r, &record.Response{Conn: c, Exchange: 1, Watch: true, StatusCode: 200},
		&record.End{Conn: c, Exchange: 1, Watch: true}, &record.Summary{})
	want := "no watch matches --resource configmaps -n demo: 1 watch left out; their resources: leases.coordination.k8s.io (1); their namespaces: kube-system (1)"
	if got := s.Unmatched(); got != want {
		t.Errorf("Unmatched:\n%s\nwant\n%s", got, want)
	}
}

// TestStageVersions: on a run on nodes (the summary counts nodes), the
// summary's object versions are those of the events the filters kept,
// each once (the merge counted every node's).
func TestStageVersions(t *testing.T) {
	c := &record.Conn{ID: 1, Client: netip.MustParseAddrPort("127.0.0.1:40000"), Server: netip.MustParseAddrPort("127.0.0.1:6443")}
	var recs []record.Record
	for ex, agent := range map[int]string{1: "kubectl/v1.37.2", 3: "curl/8.0", 5: "kubectl/v1.37.2"} {
		r := req("GET", "/api/v1/namespaces/demo/configmaps?watch=1", agent)
		r.Conn, r.Exchange, r.Watch = c, ex, true
		recs = append(recs, r, &record.Response{Conn: c, Exchange: ex, StatusCode: 200, Watch: true, Request: r})
		for i, rv := range []string{"7", "8"} {
			recs = append(recs, &record.Event{Conn: c, Exchange: ex, Seq: i + 1, Type: "MODIFIED", APIVersion: "v1", Kind: "ConfigMap", Namespace: "demo", Name: "a", ResourceVersion: rv})
		}
	}
	recs = append(recs, &record.Summary{Nodes: 2, Versions: 5})
	out, _ := stageRun(Options{UserAgent: "kubectl"}, recs...)
	if sum := out[len(out)-1].(*record.Summary); sum.Versions != 2 {
		t.Errorf("versions %d, want 2: rv 7 and 8, each delivered to both of kubectl's watches", sum.Versions)
	}
	out, _ = stageRun(Options{UserAgent: "nomatch"}, recs...)
	if sum := out[len(out)-1].(*record.Summary); sum.Versions != 0 {
		t.Errorf("versions %d with every watch left out, want 0", sum.Versions)
	}
}
