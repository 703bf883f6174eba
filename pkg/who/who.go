// Package who names the client of a connection and of a watch as a person
// reads it: the program and version its requests' User-Agent header names
// (client-go's PROGRAM/VERSION (OS/ARCH) kubernetes/COMMIT[/COMPONENT] shown
// as "kube-controller-manager/v1.37.2 … leader-election"; kubectl's with the
// command of its Kubectl-Command header; curl's, Python's and any other as
// their first product), the process at the connection's client end where
// kwatch attach knows it (its "process" note), and the node the connection
// was seen on.
//
// Of is the one function that turns a request's header section and what
// is known of its connection into an Identity; the printers, the report
// and the live table all call it, each keeping what is known of the
// connections in a Book fed with the same records. Nothing here is a
// record of its own: an Identity is derived from records (a request's
// header, a process note, a connection), so that what is read back from
// JSON Lines names its clients as what was written did.
package who

import (
	"strconv"
	"strings"

	"github.com/kwatch/kwatch/pkg/phrase"
	"github.com/kwatch/kwatch/pkg/record"
)

// Bounds of what an Identity keeps of the header values it is made from
// (bytes): a User-Agent is whatever a client sends.
const (
	// MaxUserAgentBytes bounds Agent.UserAgent.
	MaxUserAgentBytes = 512
	// maxPart bounds each part parsed out of it (program, version,
	// platform, commit, component, command).
	maxPart = 128
)

// Agent is what a request's User-Agent header (RFC 9110 §10.1.5: product
// *( RWS ( product / comment ) )) says of the program that sent it, read in
// client-go's form where it has it (k8s.io/client-go rest.DefaultKubernetesUserAgent
// and rest.AddUserAgent: "PROGRAM/VERSION (OS/ARCH) kubernetes/COMMIT", then
// "/COMPONENT" for a controller's own client).
type Agent struct {
	// UserAgent is the header's value as sent, cut at MaxUserAgentBytes;
	// empty for a connection's agent (ConnOf), whose requests may send
	// several.
	UserAgent string
	// Program and Version are the first product's name and version
	// ("kube-controller-manager", "v1.37.2"; "curl", "8.14.1"); Version
	// is up to the first "/" after the name ("OpenAPI-Generator/33.1.0/python":
	// "33.1.0").
	Program, Version string
	// Platform, Commit and Component are client-go's: "linux/amd64", the
	// commit ("abc1234"; "$Format" or "unknown" for a build that set
	// none) and what follows it ("leader-election", "replicaset-controller";
	// "" for a program's default client). Platform is set only for a
	// User-Agent of client-go's form.
	Platform, Commit, Component string
	// Command is kubectl's Kubectl-Command header (SIG CLI KEP 859), the
	// command that sent the request: "kubectl get".
	Command string
}

// ClientGo reports whether the User-Agent has client-go's form.
func (a *Agent) ClientGo() bool { return a != nil && a.Platform != "" }

// Text names the agent on one line: "kube-controller-manager/v1.37.2 …
// leader-election" (client-go's form: program and version, then the
// component), "kubectl/v1.37.2 … get" (kubectl's command), the first
// product as sent otherwise ("curl/8.14.1", "OpenAPI-Generator/33.1.0/python"),
// followed by " …" when the header holds more. Bytes from the wire are not
// escaped: printers escape them.
func (a *Agent) Text() string {
	if a == nil {
		return ""
	}
	first := a.Program
	if a.Version != "" {
		first += "/" + a.Version
	}
	if !a.ClientGo() {
		if a.UserAgent == "" {
			return first
		}
		p, rest := firstProduct(a.UserAgent)
		p = phrase.Clip(p, 2*maxPart)
		if strings.TrimSpace(rest) != "" {
			p += " …"
		}
		if a.Command != "" {
			p += " " + phrase.Clip(commandText(a.Command), maxPart)
		}
		return p
	}
	switch {
	case a.Component != "":
		return first + " … " + a.Component
	case a.Command != "":
		return first + " … " + commandText(a.Command)
	}
	return first
}

// commandText is kubectl's command without the program's name: "get" of
// "kubectl get".
func commandText(c string) string {
	if rest, ok := strings.CutPrefix(c, "kubectl "); ok && rest != "" {
		return rest
	}
	return c
}

// ParseUserAgent reads a User-Agent header's value. A value that does not
// follow RFC 9110's grammar is read as far as it does: its first
// whitespace-separated word is the product.
func ParseUserAgent(ua string) Agent {
	ua = phrase.Clip(strings.TrimSpace(ua), MaxUserAgentBytes)
	a := Agent{UserAgent: ua}
	first, rest := firstProduct(ua)
	name, version, _ := strings.Cut(first, "/")
	version, _, _ = strings.Cut(version, "/")
	a.Program, a.Version = clip(name), clip(version)
	// client-go: " (OS/ARCH) kubernetes/COMMIT[/COMPONENT]", exactly.
	rest = strings.TrimLeft(rest, " \t")
	if !strings.HasPrefix(rest, "(") {
		return a
	}
	end := strings.IndexByte(rest, ')')
	if end < 0 {
		return a
	}
	platform := rest[1:end]
	tail, ok := strings.CutPrefix(strings.TrimLeft(rest[end+1:], " \t"), "kubernetes/")
	if !ok || strings.ContainsAny(platform, " ()") || !strings.Contains(platform, "/") || strings.ContainsAny(tail, " \t") {
		return a
	}
	commit, component, _ := strings.Cut(tail, "/")
	a.Platform, a.Commit, a.Component = clip(platform), clip(commit), clip(component)
	return a
}

// firstProduct splits a User-Agent into its first product (up to the
// first whitespace or comment) and the rest.
func firstProduct(ua string) (first, rest string) {
	i := strings.IndexAny(ua, " \t(")
	if i < 0 {
		return ua, ""
	}
	return ua[:i], ua[i:]
}

func clip(s string) string { return phrase.Clip(s, maxPart) }

// Conn is what is known of a connection's client beyond its requests.
type Conn struct {
	// Process is the process at the connection's client end (kwatch
	// attach's "process" note: record.ConnProcess with Role "client");
	// nil when not known.
	Process *record.ConnProcess
	// Node is the Kubernetes node the connection was seen on; "" when it
	// was seen by this kwatch itself.
	Node string
}

// Identity names a client: what its User-Agent says, its process, its
// node. The zero Identity knows nothing.
type Identity struct {
	// Agent is from the User-Agent header; nil when none was seen (no
	// request, a request without one, or one HPACK could not decode).
	Agent *Agent
	// Process and Node are the connection's (Conn).
	Process *record.ConnProcess
	Node    string
}

// Of names the client of a request from its header section (User-Agent,
// and kubectl's Kubectl-Command; names in any letter case, as HTTP/1.1
// sends them and HTTP/2 lowercases them) and what is known of its
// connection.
func Of(header map[string][]string, c Conn) Identity {
	id := Identity{Process: c.Process, Node: c.Node}
	if ua, ok := headerValue(header, "User-Agent"); ok {
		a := ParseUserAgent(ua)
		if cmd, ok := headerValue(header, "Kubectl-Command"); ok {
			a.Command = clip(strings.TrimSpace(cmd))
		}
		id.Agent = &a
	}
	return id
}

// ConnOf names the client of a connection from its first request shown (nil:
// none) and what is known of it: the same as Of, but of the User-Agent only
// the program, its version, platform and commit, which hold for every
// request a program sends; the component and the command are each
// request's (client-go shares one HTTP/2 connection among a program's
// clients: kube-controller-manager's controllers watch over one).
func ConnOf(first *record.Request, c Conn) Identity {
	if first == nil {
		return Identity{Process: c.Process, Node: c.Node}
	}
	id := Of(first.Header, c)
	if a := id.Agent; a != nil {
		p := Agent{Program: a.Program, Version: a.Version, Platform: a.Platform, Commit: a.Commit}
		if !a.ClientGo() {
			// Its first product as sent.
			p.UserAgent, _ = firstProduct(a.UserAgent)
		}
		id.Agent = &p
	}
	return id
}

// IsZero reports whether nothing is known.
func (id Identity) IsZero() bool { return id.Agent == nil && id.Process == nil && id.Node == "" }

// Text names the client on one line, as the printers and the live table
// show it: the agent's text, then in parentheses the process (its name
// when it is not the agent's program) and the node, e.g.
// "kube-controller-manager/v1.37.2 … leader-election (pid 8162)",
// "kwatch-watcher/v0.0.0 (my-controller, pid 6429, node 127.0.0.2)",
// "kube-controller-manager (pid 8162)" with no User-Agent known; "" when
// nothing is known. Bytes from the wire are not escaped: printers escape
// them.
func (id Identity) Text() string {
	s := id.Agent.Text()
	var in []string
	if p := id.Process; p != nil {
		pid := "pid " + strconv.Itoa(p.PID)
		switch {
		case s == "":
			s = p.Name
			in = append(in, pid)
		case id.Agent == nil || p.Name != id.Agent.Program:
			in = append(in, p.Name+", "+pid)
		default:
			in = append(in, pid)
		}
	}
	if id.Node != "" {
		if s == "" {
			s = "node " + id.Node
		} else {
			in = append(in, "node "+id.Node)
		}
	}
	if len(in) > 0 {
		s += " (" + strings.Join(in, ", ") + ")"
	}
	return s
}

// WithoutProcess returns id without its process: what a line says when the
// process is said on a line of its own (kwatch attach's process note).
func (id Identity) WithoutProcess() Identity {
	id.Process = nil
	return id
}

// headerValue returns the first value of the header field name, matched in
// any letter case.
func headerValue(h map[string][]string, name string) (string, bool) {
	if v, ok := h[name]; ok && len(v) > 0 {
		return v[0], true
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, name) {
			return v[0], true
		}
	}
	return "", false
}

// MaxConns bounds the connections a Book keeps; past it a connection's
// process is not known to it (its identity then names its User-Agent
// only).
const MaxConns = 1 << 16

// Book keeps what is known of each connection's client beyond its
// requests, from the records a sink sees: the client process of kwatch
// attach's "process" note (record.ConnNote.Processes), until the
// connection's last record (a "closed" or "capture-ended" note). A Book
// is not safe for concurrent use: a sink feeds it from Emit.
type Book struct {
	procs map[int]*record.ConnProcess
}

// NewBook returns an empty Book.
func NewBook() *Book { return &Book{procs: map[int]*record.ConnProcess{}} }

// See takes what r says of its connection's client.
func (b *Book) See(r record.Record) {
	n, ok := r.(*record.ConnNote)
	if !ok || n.Conn == nil {
		return
	}
	switch n.Kind {
	case "process":
		for i := range n.Processes {
			if p := n.Processes[i]; p.Role == "client" && (len(b.procs) < MaxConns || b.procs[n.Conn.ID] != nil) {
				b.procs[n.Conn.ID] = &p
				break
			}
		}
	case "closed", "capture-ended":
		// The connection's last record.
		delete(b.procs, n.Conn.ID)
	}
}

// Known returns what is known of connection c's client.
func (b *Book) Known(c *record.Conn) Conn {
	if c == nil {
		return Conn{}
	}
	return Conn{Process: b.procs[c.ID], Node: c.Node}
}

// Of names the client of request r: Of(r.Header, b.Known(r.Conn)).
func (b *Book) Of(r *record.Request) Identity { return Of(r.Header, b.Known(r.Conn)) }
