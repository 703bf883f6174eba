package record

import (
	"net/url"
	"path"
	"strings"
)

// TargetScope reads what a request target of the Kubernetes API is about,
// as kube-apiserver's RequestInfoFactory reads a path (k8s.io/apiserver
// pkg/endpoints/request/requestinfo.go): /api/VERSION/… (the core group)
// or /apis/GROUP/VERSION/…, the deprecated /watch/ prefix, then
// namespaces/NAMESPACE/RESOURCE[/NAME] or RESOURCE[/NAME]. Resource is
// named as kubectl names it ("configmaps", "deployments.apps"), a NAME is
// the field selector metadata.name=NAME (as kubectl get RESOURCE/NAME -w
// asks for it), and the labelSelector and fieldSelector query parameters
// are the selectors. A namespaced resource watched in every namespace and a
// cluster-scoped one both leave Namespace "" (the path does not say which
// it is); AllNamespaces is never set. ok is false for a target that names
// no resource: a subresource (pods/NAME/log, namespaces/NS/status), a
// discovery path (/api, /apis/apps/v1), /healthz, one that does not parse.
func TargetScope(target string) (s Scope, ok bool) {
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return Scope{}, false
	}
	parts := strings.Split(strings.TrimPrefix(path.Clean("/"+u.Path), "/"), "/")
	group := ""
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		group, parts = parts[1], parts[3:]
	default:
		return Scope{}, false
	}
	if parts[0] == "watch" {
		parts = parts[1:]
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		if parts[2] == "status" || parts[2] == "finalize" {
			return Scope{}, false // the namespace's own subresources
		}
		s.Namespace, parts = parts[1], parts[2:]
	}
	name := ""
	switch len(parts) {
	case 1:
	case 2:
		name = parts[1]
	default:
		return Scope{}, false
	}
	if parts[0] == "" || name == "" && len(parts) == 2 {
		return Scope{}, false
	}
	s.Resource = parts[0]
	if group != "" {
		s.Resource += "." + group
	}
	q := u.Query()
	s.LabelSelector, s.FieldSelector = q.Get("labelSelector"), q.Get("fieldSelector")
	if name != "" {
		byName := "metadata.name=" + name
		if s.FieldSelector != "" {
			byName += "," + s.FieldSelector
		}
		s.FieldSelector = byName
	}
	return s, true
}
