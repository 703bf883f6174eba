package printer

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kwatch/kwatch/pkg/record"
)

// whoRecords are an attached server's view of a client on the node: its
// process note, a watch request with client-go's User-Agent, and a watch
// whose request was not seen (joined mid-connection).
func whoRecords() []record.Record {
	t0 := time.Date(2026, 12, 4, 4, 46, 11, 0, time.UTC)
	c := &record.Conn{ID: 1, HTTP2: true, Client: netip.MustParseAddrPort("127.0.0.1:40030"), Server: netip.MustParseAddrPort("127.0.0.1:6443")}
	return []record.Record{
		&record.ConnNote{Conn: c, Time: t0, Kind: "process", Message: "client kube-controller-manager (pid 812) · server kube-apiserver (pid 7)",
			Processes: []record.ConnProcess{{Role: "client", PID: 812, Name: "kube-controller-manager"}, {Role: "server", PID: 7, Name: "kube-apiserver", Attached: true}}},
		&record.Request{Conn: c, Exchange: 3, Time: t0, Method: "GET", Target: "/apis/apps/v1/replicasets?watch=true", Proto: "HTTP/2.0", Watch: true,
			Header: map[string][]string{"user-agent": {"kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abc1234/replicaset-controller"}}},
		&record.Response{Conn: c, Exchange: 3, Time: t0, Proto: "HTTP/2.0", StatusCode: 200, Reason: "OK", Watch: true, Format: "protobuf",
			ContentType: "application/vnd.kubernetes.protobuf;stream=watch", Request: &record.Request{Watch: true}},
		&record.Response{Conn: c, Exchange: 5, Time: t0, Proto: "HTTP/2.0", StatusCode: 200, Reason: "OK", Watch: true, Format: "protobuf", Inferred: true,
			ContentType: "application/vnd.kubernetes.protobuf;stream=watch"},
		&record.Request{Conn: c, Exchange: 7, Time: t0, Method: "GET", Target: "/api/v1/pods?watch=true", Proto: "HTTP/2.0", Watch: true,
			Header: map[string][]string{"user-agent": {"evil/1\x1b[2J (linux/amd64) kubernetes/x"}}},
	}
}

// TestPrettyWho: the first line of the connection names its client's
// program and version (its process is said by the note below it); the
// first line of each watch names the whole client, User-Agent and
// process, or the process alone for a watch whose request was not seen;
// bytes of the User-Agent are escaped.
func TestPrettyWho(t *testing.T) {
	var out bytes.Buffer
	p := NewPretty(&out, Options{})
	for _, r := range whoRecords() {
		p.Emit(r)
	}
	p.Flush()
	for _, want := range []string{
		"#1 127.0.0.1:40030 -> 127.0.0.1:6443 · client kube-controller-manager/v1.37.2\n",
		"#1 client kube-controller-manager (pid 812) · server kube-apiserver (pid 7)\n",
		"#1 s3 > GET /apis/apps/v1/replicasets?watch=true HTTP/2.0 · client kube-controller-manager/v1.37.2 … replicaset-controller (pid 812)\n",
		"#1 s5 < HTTP/2.0 200 OK · application/vnd.kubernetes.protobuf;stream=watch · watch (request not captured) · inferred from the body · client kube-controller-manager (pid 812)\n",
		`#1 s7 > GET /api/v1/pods?watch=true HTTP/2.0 · client evil/1\x1b[2J (kube-controller-manager, pid 812)` + "\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no line %q in:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "\x1b") {
		t.Errorf("an escape reached the terminal:\n%q", out.String())
	}
}

// TestJSONWho: -o json has the same names, as fields.
func TestJSONWho(t *testing.T) {
	var out bytes.Buffer
	j := NewJSON(&out, Options{})
	for _, r := range whoRecords() {
		j.Emit(r)
	}
	j.Flush()
	type identity struct {
		Text, UserAgent, Program, Version, Platform, Commit, Component, Node string
		Process                                                              *record.ConnProcess
	}
	var got []identity
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r struct {
			Record   string
			Identity *identity
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		if r.Identity != nil {
			got = append(got, *r.Identity)
		}
	}
	kcm := &record.ConnProcess{Role: "client", PID: 812, Name: "kube-controller-manager"}
	want := []identity{
		{Text: "kube-controller-manager/v1.37.2 (pid 812)", Program: "kube-controller-manager", Version: "v1.37.2", Platform: "linux/amd64", Commit: "abc1234", Process: kcm},
		{Text: "kube-controller-manager/v1.37.2 … replicaset-controller (pid 812)", UserAgent: "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abc1234/replicaset-controller",
			Program: "kube-controller-manager", Version: "v1.37.2", Platform: "linux/amd64", Commit: "abc1234", Component: "replicaset-controller", Process: kcm},
		{Text: "kube-controller-manager (pid 812)", Process: kcm},
	}
	if len(got) != 4 {
		t.Fatalf("%d records with an identity, want 4:\n%s", len(got), out.String())
	}
	for i, w := range want {
		g := got[i]
		if g.Text != w.Text || g.UserAgent != w.UserAgent || g.Program != w.Program || g.Version != w.Version || g.Platform != w.Platform ||
			g.Commit != w.Commit || g.Component != w.Component || g.Process == nil || *g.Process != *w.Process {
			t.Errorf("identity %d: %+v (process %+v), want %+v", i, g, g.Process, w)
		}
	}
	if !strings.Contains(out.String(), `"userAgent":"evil/1\u001b[2J (linux/amd64) kubernetes/x"`) {
		t.Errorf("JSON does not keep the User-Agent's bytes:\n%s", out.String())
	}
}
