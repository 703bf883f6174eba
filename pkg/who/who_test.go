package who

import (
	"strings"
	"testing"

	"github.com/kwatch/kwatch/pkg/record"
)

func TestParseUserAgent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, ua string
		want     Agent
		text     string
	}{
		{name: "controller", ua: "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abc1234/leader-election",
			want: Agent{Program: "kube-controller-manager", Version: "v1.37.2", Platform: "linux/amd64", Commit: "abc1234", Component: "leader-election"},
			text: "kube-controller-manager/v1.37.2 … leader-election"},
		{name: "program's default client", ua: "kube-scheduler/v1.37.2 (linux/arm64) kubernetes/0123456",
			want: Agent{Program: "kube-scheduler", Version: "v1.37.2", Platform: "linux/arm64", Commit: "0123456"},
			text: "kube-scheduler/v1.37.2"},
		{name: "component with a slash", ua: "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abc1234/system:serviceaccount:kube-system/x",
			want: Agent{Program: "kube-controller-manager", Version: "v1.37.2", Platform: "linux/amd64", Commit: "abc1234", Component: "system:serviceaccount:kube-system/x"},
			text: "kube-controller-manager/v1.37.2 … system:serviceaccount:kube-system/x"},
		{name: "unversioned build", ua: "kwatch-watcher/v0.0.0 (linux/amd64) kubernetes/$Format",
			want: Agent{Program: "kwatch-watcher", Version: "v0.0.0", Platform: "linux/amd64", Commit: "$Format"},
			text: "kwatch-watcher/v0.0.0"},
		{name: "kubectl", ua: "kubectl/v1.37.2 (linux/amd64) kubernetes/abc1234",
			want: Agent{Program: "kubectl", Version: "v1.37.2", Platform: "linux/amd64", Commit: "abc1234"},
			text: "kubectl/v1.37.2"},
		{name: "curl", ua: "curl/8.14.1", want: Agent{Program: "curl", Version: "8.14.1"}, text: "curl/8.14.1"},
		{name: "python client", ua: "OpenAPI-Generator/33.1.0/python",
			want: Agent{Program: "OpenAPI-Generator", Version: "33.1.0"}, text: "OpenAPI-Generator/33.1.0/python"},
		{name: "python requests", ua: "python-requests/2.32.3", want: Agent{Program: "python-requests", Version: "2.32.3"}, text: "python-requests/2.32.3"},
		{name: "Go", ua: "Go-http-client/2.0", want: Agent{Program: "Go-http-client", Version: "2.0"}, text: "Go-http-client/2.0"},
		{name: "browser", ua: "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/140.0 Safari/537.36",
			want: Agent{Program: "Mozilla", Version: "5.0"}, text: "Mozilla/5.0 …"},
		{name: "comment, not client-go's", ua: "thing/1 (linux/amd64) other/2",
			want: Agent{Program: "thing", Version: "1"}, text: "thing/1 …"},
		{name: "no version", ua: "probe", want: Agent{Program: "probe"}, text: "probe"},
		{name: "unclosed comment", ua: "x/1 (linux/amd64 kubernetes/abc", want: Agent{Program: "x", Version: "1"}, text: "x/1 …"},
		{name: "empty", ua: "", want: Agent{}, text: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseUserAgent(tc.ua)
			tc.want.UserAgent = tc.ua
			if got != tc.want {
				t.Errorf("ParseUserAgent(%q) =\n%+v, want\n%+v", tc.ua, got, tc.want)
			}
			if s := got.Text(); s != tc.text {
				t.Errorf("Text() = %q, want %q", s, tc.text)
			}
		})
	}
}

func TestParseUserAgentBounded(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("p", 10000) + "/" + strings.Repeat("1", 10000) + " (linux/amd64) kubernetes/" + strings.Repeat("c", 10000)
	a := ParseUserAgent(long)
	if len(a.UserAgent) > MaxUserAgentBytes+len("…") || len(a.Program) > maxPart+len("…") {
		t.Errorf("kept %d bytes of the User-Agent and %d of its program", len(a.UserAgent), len(a.Program))
	}
	if n := len(a.Text()); n > 3*maxPart {
		t.Errorf("Text() is %d bytes", n)
	}
}

func TestIdentityText(t *testing.T) {
	t.Parallel()
	kcm := &record.ConnProcess{Role: "client", PID: 8162, Name: "kube-controller-manager"}
	mine := &record.ConnProcess{Role: "client", PID: 6429, Name: "my-controller"}
	h := func(kv ...string) map[string][]string {
		m := map[string][]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = append(m[kv[i]], kv[i+1])
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		header map[string][]string
		conn   Conn
		want   string
	}{
		{name: "User-Agent and its process", header: h("user-agent", "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abc1234/leader-election"),
			conn: Conn{Process: kcm}, want: "kube-controller-manager/v1.37.2 … leader-election (pid 8162)"},
		{name: "another process", header: h("User-Agent", "kwatch-watcher/v0.0.0 (linux/amd64) kubernetes/$Format"),
			conn: Conn{Process: mine, Node: "127.0.0.2"}, want: "kwatch-watcher/v0.0.0 (my-controller, pid 6429, node 127.0.0.2)"},
		{name: "process only (HPACK did not decode it)", conn: Conn{Process: kcm}, want: "kube-controller-manager (pid 8162)"},
		{name: "node only", conn: Conn{Node: "node-a"}, want: "node node-a"},
		{name: "kubectl's command", header: h("User-Agent", "kubectl/v1.37.2 (linux/amd64) kubernetes/abc1234", "Kubectl-Command", "kubectl get", "Kubectl-Session", "x"),
			want: "kubectl/v1.37.2 … get"},
		{name: "nothing", header: h("Accept", "application/json")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := Of(tc.header, tc.conn)
			if got := id.Text(); got != tc.want {
				t.Errorf("Text() = %q, want %q", got, tc.want)
			}
			if id.IsZero() != (tc.want == "") {
				t.Errorf("IsZero() = %v for %q", id.IsZero(), tc.want)
			}
		})
	}
}

func TestConnOf(t *testing.T) {
	t.Parallel()
	req := &record.Request{Header: map[string][]string{"user-agent": {"kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abc1234/leader-election"}}}
	kcm := &record.ConnProcess{Role: "client", PID: 8162, Name: "kube-controller-manager"}
	id := ConnOf(req, Conn{Process: kcm})
	if got, want := id.Text(), "kube-controller-manager/v1.37.2 (pid 8162)"; got != want {
		t.Errorf("ConnOf: %q, want %q", got, want)
	}
	if id.Agent.Component != "" || id.Agent.UserAgent != "" {
		t.Errorf("a connection's agent keeps a request's component or header: %+v", id.Agent)
	}
	if got, want := id.WithoutProcess().Text(), "kube-controller-manager/v1.37.2"; got != want {
		t.Errorf("WithoutProcess: %q, want %q", got, want)
	}
	curl := ConnOf(&record.Request{Header: map[string][]string{"User-Agent": {"curl/8.14.1 extra"}}}, Conn{})
	if got, want := curl.Text(), "curl/8.14.1"; got != want {
		t.Errorf("ConnOf curl: %q, want %q", got, want)
	}
	if got := ConnOf(nil, Conn{}); !got.IsZero() {
		t.Errorf("ConnOf(nil) = %+v", got)
	}
}

func TestBook(t *testing.T) {
	t.Parallel()
	b := NewBook()
	c := &record.Conn{ID: 3}
	b.See(&record.ConnNote{Conn: c, Kind: "process", Processes: []record.ConnProcess{
		{Role: "client", PID: 42, Name: "kubectl"}, {Role: "server", PID: 7, Name: "kube-apiserver", Attached: true}}})
	req := &record.Request{Conn: c, Header: map[string][]string{"User-Agent": {"kubectl/v1.37.2 (linux/amd64) kubernetes/abc1234"}}}
	if got, want := b.Of(req).Text(), "kubectl/v1.37.2 (pid 42)"; got != want {
		t.Errorf("Of: %q, want %q", got, want)
	}
	// A server-only note names no client.
	other := &record.Conn{ID: 4}
	b.See(&record.ConnNote{Conn: other, Kind: "process", Processes: []record.ConnProcess{{Role: "server", PID: 7, Name: "kube-apiserver"}}})
	if p := b.Known(other).Process; p != nil {
		t.Errorf("a server-only note gave client %+v", p)
	}
	b.See(&record.ConnNote{Conn: c, Kind: "closed"})
	if p := b.Known(c).Process; p != nil {
		t.Errorf("the connection's process is kept after it closed: %+v", p)
	}
	if got := b.Known(nil); got != (Conn{}) {
		t.Errorf("Known(nil) = %+v", got)
	}
}
