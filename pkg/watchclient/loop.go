package watchclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/phrase"
	"github.com/kwatch/kwatch/pkg/record"
)

// WatchOptions say what to list and watch.
type WatchOptions struct {
	// Resource to list and watch (from Client.Resolve); ignored with Raw.
	Resource Resource
	// Namespace, or "" for all namespaces (and cluster-scoped resources).
	Namespace string
	// AllNamespaces says that "" in Namespace was asked for (-A), for
	// the LIST and WATCH lines.
	AllNamespaces bool
	// Name restricts the watch to one object (field selector
	// metadata.name=Name), as `kubectl get RESOURCE/NAME -w` does.
	Name string
	// LabelSelector and FieldSelector filter as kubectl's -l and
	// --field-selector.
	LabelSelector, FieldSelector string
	// ResourceVersion, when set, skips the first LIST and watches from it.
	ResourceVersion string
	// TimeoutSeconds asks the server to end each watch after that many
	// seconds (0: the server's default, 30 to 60 minutes).
	TimeoutSeconds int64
	// Raw watches this exact path and query (e.g.
	// "/api/v1/watch/namespaces/default/configmaps") without a LIST; a
	// resume adds resourceVersion=LAST.
	Raw string
	// Proto asks for application/vnd.kubernetes.protobuf;stream=watch.
	Proto bool
	// CBOR asks for application/cbor (the API server answers a watch
	// with application/cbor-seq; alpha, feature gate CBORServingAndStorage).
	CBOR bool
	// ListObjects puts the listed objects in record.List (to show them,
	// and for --diff, so that the first change of a listed object has a
	// version to diff with).
	ListObjects bool
	// ShowList marks the LIST records so that printers show their
	// objects, the current state, one line each (kubectl get -w does;
	// --watch-only does not). It needs ListObjects.
	ShowList bool
	// IdleTimeout, when not 0, ends a watch that reads no byte for that
	// long (a stalled server or proxy), reports it, and watches again.
	IdleTimeout time.Duration
	// QuietAfter, when not 0, says once, as a warning, that a watch which
	// asked for bookmarks got neither an event nor a bookmark for that
	// long after its response (kube-apiserver sends such a watch a
	// bookmark about every minute, its watch cache's bookmark frequency),
	// with the likely cause when the server's current resourceVersion is
	// behind the watch's: an etcd restored or reset, whose versions the
	// watch waits for in vain, as an informer would. The watch goes on.
	QuietAfter time.Duration
	// WatchList gets the current state as the watch's first events
	// instead of a LIST (a streaming list, KEP-3157, as client-go 0.37's
	// informers do: sendInitialEvents=true, resourceVersionMatch=
	// NotOlderThan), also after 410 Gone. A server that refuses it (400 or
	// 422) is listed instead, with a warning.
	WatchList bool
	// Backoff bounds retries; the zero value means 500 ms doubling to 30 s.
	Backoff wait.Backoff
}

// Stats counts what a list-watch did.
type Stats struct {
	// Watches counts watch requests made; Opened those the server
	// answered with a watch stream.
	Watches int
	Opened  int
	Lists   int
	Relists int
	Events  int
	// Retries counts failed lists and watches that were retried.
	Retries int
}

// endPhrase says in words how a watch's body ended, from record.End.How.
func endPhrase(how string) string {
	switch {
	case how == "":
		return "the watch ended"
	case how == "last-chunk":
		return "the server ended the watch (last-chunk)"
	case how == "end of stream":
		return "the server ended the watch (END_STREAM)"
	case how == "reset by RST_STREAM":
		return "the stream was reset (RST_STREAM)"
	case strings.HasPrefix(how, "closed without"), strings.HasPrefix(how, "reset"):
		return "the connection " + how
	}
	return "the watch ended (" + how + ")"
}

// quickEnd: a watch that ends sooner than this without an event is retried
// with back-off rather than at once.
const quickEnd = time.Second

// errGone means the watch must re-list (410 Gone / Expired).
var errGone = errors.New("resource version too old")

// object is what the loop remembers of each object.

// Run lists and watches until ctx ends, emitting records to the Client's
// sink. It returns nil when ctx ends after at least one watch was opened; an
// error that retrying cannot fix (400, 401, 403, 404, 405, 406, 415, 422, a
// 500 refusing the resourceVersion, 410 Gone for a --raw path, a server
// never reached) at once; and an error wrapping ErrOnlyRetried when ctx
// ends and every attempt had failed and been retried.
func Run(ctx context.Context, c *Client, opt WatchOptions) (*Stats, error) {
	if opt.Backoff.Duration == 0 {
		opt.Backoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 30 * time.Second}
	}
	l := &loop{c: c, opt: opt, stats: &Stats{}, known: map[string]record.Version{}}
	rc, err := c.watchREST()
	if err != nil {
		return l.stats, err
	}
	l.lw = &cache.ListWatch{
		ListWithContextFunc:  l.list,
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return l.watch(ctx, rc, o) },
	}
	return l.stats, l.run(ctx)
}

type loop struct {
	c     *Client
	opt   WatchOptions
	lw    *cache.ListWatch
	stats *Stats
	known map[string]record.Version
	// rv is the resourceVersion reached; rvMu guards its writes and
	// rvNow's read (quiet reads it from a goroutine of its own).
	rv      string
	rvMu    sync.Mutex
	listed  bool
	started time.Time // when the current watch opened
	// lastEnd and lastEvents say how the last watch's body ended (the
	// End record's How) and how many events it carried.
	lastEnd    string
	lastEvents int
	lastWatch  bool   // the last response was a watch stream
	stalled    bool   // the watchdog ended the last watch
	lastErr    string // the last error retried
	// watchList: the next watch gets the current state first (WatchList,
	// and no LIST is wanted); wasWatchList: the last watch did;
	// listInstead: the server refused it.
	watchList, wasWatchList, listInstead bool
	// collecting gathers the objects of a watch-list's initial events
	// until its initial-events-end bookmark: the state a LIST would have
	// given, compared with the one known before (a re-list's diff).
	collecting map[string]record.Version
	// saidAbsent is set once the object of RESOURCE/NAME was said to be
	// missing from the first state (absent).
	saidAbsent bool
}

func (l *loop) emit(r record.Record) { l.c.sink.Emit(r) }

// cause is why a LIST or a watch is made: the words shown (record.List's
// and record.WatchStart's Reason), their kind, and whether the watch is a
// watch-list (it brings the current state itself).
type cause struct {
	text      string
	why       record.Why
	watchList bool
}

func (l *loop) run(ctx context.Context) error {
	backoff := l.opt.Backoff
	reason := cause{text: "initial", why: record.WhyInitial}
	l.setRV(l.opt.ResourceVersion)
	needList := l.opt.Raw == "" && l.rv == ""
	for ctx.Err() == nil {
		if needList && l.opt.WatchList && !l.listInstead {
			// The watch itself brings the current state.
			needList, l.watchList = false, true
			l.setRV("")
			l.collecting = map[string]record.Version{}
			if reason.why != record.WhyInitial {
				l.stats.Relists++
			}
			reason.text += " (watch-list)"
			reason.watchList = true
		}
		if needList {
			if err := l.doList(ctx, reason); err != nil {
				if ctx.Err() != nil {
					break
				}
				if perr := l.permanent(err, "list "+l.listPath()); perr != nil {
					return perr
				}
				l.retry(ctx, err, &backoff)
				continue
			}
			needList = false
			reason = cause{text: "after LIST", why: record.WhyAfterList}
		}
		watchReason := reason
		err := l.watchOnce(ctx, reason)
		switch {
		case ctx.Err() != nil:
			return l.onlyRetried()
		case errors.Is(err, errGone):
			if l.opt.Raw != "" {
				return fmt.Errorf("watch %s: resourceVersion %s is too old (410 Gone), and a --raw path cannot be listed again: "+
					"watch without a resourceVersion in the path, or use RESOURCE instead of --raw (kwatch then lists again, as informers do)",
					l.path(metav1.ListOptions{ResourceVersion: l.rv}), orNone(l.rawRV()))
			}
			needList = true
			reason = cause{text: "re-list after 410 Gone", why: record.WhyRelist}
			backoff = l.opt.Backoff
		case l.wasWatchList && (apierrors.IsBadRequest(err) || apierrors.IsInvalid(err)):
			// A server without streaming lists (or with them off):
			// list, as client-go falls back.
			l.watchList, l.listInstead, needList = false, true, true
			l.collecting = nil // what comes next is a LIST, then a plain watch
			l.emit(&record.Problem{Time: time.Now(), Offset: -1, Warning: true, Kind: "watch-list refused",
				Detail: fmt.Sprintf("the API server refused a streaming list of %s: %v", l.resourceName(), err),
				Hint:   "listing, then watching, as client-go falls back; if the LIST is refused too, the request itself is at fault (a selector, a field), not streaming lists"})
			reason = cause{text: "initial (watch-list refused)", why: record.WhyInitial}
		case l.opt.Proto && apierrors.IsNotAcceptable(err):
			// As client-go does for types served only as JSON (custom
			// resources): ask again for JSON, and say so.
			l.opt.Proto = false
			l.watchList = l.wasWatchList // the same request, as JSON
			l.emit(&record.Problem{Time: time.Now(), Offset: -1, Warning: true, Kind: "protobuf not served",
				Detail: fmt.Sprintf("%s answered 406 Not Acceptable to %s", l.resourceName(), event.MediaProtobuf),
				Hint:   "watching as JSON instead, as client-go does (custom resources are served as JSON only)"})
			reason = cause{text: "as JSON: protobuf not served", why: record.WhyFallback}
		case l.opt.CBOR && apierrors.IsNotAcceptable(err):
			l.opt.CBOR = false
			l.watchList = l.wasWatchList
			l.emit(&record.Problem{Time: time.Now(), Offset: -1, Warning: true, Kind: "CBOR not served",
				Detail: fmt.Sprintf("%s answered 406 Not Acceptable to %s", l.resourceName(), event.MediaCBOR),
				Hint:   "watching as JSON instead; the API server serves CBOR only with the feature gate CBORServingAndStorage (alpha in 1.37)"})
			reason = cause{text: "as JSON: CBOR not served", why: record.WhyFallback}
		case err != nil:
			if perr := l.permanent(err, "watch "+l.path(metav1.ListOptions{ResourceVersion: l.rv})); perr != nil {
				return perr
			}
			l.retry(ctx, err, &backoff)
			reason = cause{text: "resume after an error", why: record.WhyResume}
			if l.collecting != nil {
				// The watch-list failed before its initial state was
				// complete: get the whole state again, as client-go's
				// reflector starts a new watch-list.
				l.collecting, needList = nil, true
				reason = cause{text: "re-list: the watch-list failed before its initial state was complete", why: record.WhyRelist}
				if watchReason.why == record.WhyInitial {
					reason = cause{text: "initial", why: record.WhyInitial} // the first state is not yet known: no re-list
				}
			}
		case l.collecting != nil:
			// The watch-list ended before its initial state was
			// complete: what was collected is not the whole state.
			l.collecting, needList = nil, true
			reason = cause{text: "re-list: the watch-list ended before its initial state was complete", why: record.WhyRelist}
			l.retry(ctx, fmt.Errorf("%s before the initial-events-end bookmark", endPhrase(l.lastEnd)), &backoff)
		default:
			// How the watch's body ended, as its own decoder saw it.
			if l.lastEnd != "" && !l.lastWatch && !l.stalled {
				l.stats.Opened-- // answered, but not with a watch stream
				return fmt.Errorf("the answer to %s is not a watch stream (see the response above); give a watch path, e.g. /api/v1/namespaces/default/configmaps?watch=1", l.path(metav1.ListOptions{ResourceVersion: l.rv}))
			}
			how, events := endPhrase(l.lastEnd), l.lastEvents
			if l.stalled {
				how, l.stalled = "the watch stalled (--idle-timeout)", false
			}
			if events == 0 && time.Since(l.started) < quickEnd {
				// A watch that ends at once without an event (a path
				// that is not a watch, a proxy that closes) must not
				// be reopened in a tight loop.
				l.retry(ctx, fmt.Errorf("%s after %s without an event", how, time.Since(l.started).Round(time.Millisecond)), &backoff)
			} else {
				backoff = l.opt.Backoff
			}
			reason = cause{text: "resume: " + how, why: record.WhyResume}
		}
	}
	return l.onlyRetried()
}

// onlyRetried returns the error of a run that ended (Ctrl-C) without the
// server ever answering a watch with a watch stream: every attempt failed
// and was retried, so the run did not do what it was asked.
func (l *loop) onlyRetried() error {
	switch {
	case l.stats.Opened > 0 || l.c.sink.watchAnswers.Load() > 0:
		// Interrupted after a watch stream was answered (and shown),
		// perhaps before its request returned to the loop.
		return nil
	case l.stats.Retries == 0:
		return fmt.Errorf("%w: no watch was opened: interrupted before the server answered", ErrOnlyRetried)
	}
	return fmt.Errorf("%w: no watch was opened; %d %s failed, the last with: %s", ErrOnlyRetried,
		l.stats.Retries, phrase.Plural(l.stats.Retries, "attempt"), l.lastErr)
}

// ErrOnlyRetried is wrapped by the error of a run in which every list or
// watch attempt failed and was retried until Ctrl-C.
var ErrOnlyRetried = errors.New("gave up")

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// rawRV returns the resourceVersion the --raw watch asked for: the last
// one seen, or the one in the path.
func (l *loop) rawRV() string {
	if l.rv != "" {
		return l.rv
	}
	if u, err := url.Parse(l.opt.Raw); err == nil {
		return u.Query().Get("resourceVersion")
	}
	return ""
}

// resourceName names what is watched, for messages.
func (l *loop) resourceName() string {
	if l.opt.Raw != "" {
		return l.opt.Raw
	}
	return l.opt.Resource.String()
}

// absent warns, once, when the first state the server gave (n objects) is
// empty because the namespace watched does not exist (a mistyped -n: the
// API server answers a watch or a LIST in a missing namespace with nothing,
// as kubectl get does), or because the object of RESOURCE/NAME is not in
// it: the watch goes on and shows what is created, where kubectl get NAME
// -w stops with NotFound.
func (l *loop) absent(ctx context.Context, n int) {
	if n > 0 || l.saidAbsent {
		return
	}
	if l.namespaceMissing(ctx) {
		l.saidAbsent = true
		l.emit(&record.Problem{Time: time.Now(), Offset: -1, Warning: true, Kind: "namespace not found",
			Detail: fmt.Sprintf("namespace %q does not exist: no %s in it", l.opt.Namespace, l.resourceName()),
			Hint:   "watching for it to be created; check -n (kubectl get namespaces)"})
		return
	}
	if l.opt.Name == "" {
		return
	}
	l.saidAbsent = true
	where := ""
	if l.opt.Resource.Namespaced && l.opt.Namespace != "" {
		where = " in namespace " + l.opt.Namespace
	}
	l.emit(&record.Problem{Time: time.Now(), Offset: -1, Warning: true, Kind: "object not found",
		Detail: fmt.Sprintf("no %s named %q%s", l.resourceName(), l.opt.Name, where),
		Hint:   "watching for it to be created; check the name and -n if it should exist"})
}

// namespaceMissing reports whether the API server answers a GET of the
// namespace watched with 404 Not Found; false for a watch of all
// namespaces, of a cluster-scoped resource, of a --raw path, and for any
// other answer (credentials that may not get namespaces among them).
func (l *loop) namespaceMissing(ctx context.Context) bool {
	if l.opt.Raw != "" || !l.opt.Resource.Namespaced || l.opt.Namespace == "" {
		return false
	}
	dc, err := l.c.dynamic()
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = dc.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(ctx, l.opt.Namespace, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// listPath is the LIST request's path, for messages.
func (l *loop) listPath() string {
	p := l.path(l.listOptions())
	p, _, _ = strings.Cut(p, "?")
	return p
}

// permanent returns the error to stop with when retrying err cannot help:
// the server's answer will be the same (Kubernetes API concepts: status
// codes). what names the request ("watch /api/v1/…"). It returns nil for
// errors worth retrying: connection failures once kwatch has reached the
// server, 429 Too Many Requests, other 5xx, a body cut short.
func (l *loop) permanent(err error, what string) error {
	err = event.WithoutData(err) // a LIST body without a kind is quoted whole
	code := 0
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		code = int(se.Status().Code)
	}
	hint := ""
	switch {
	case apierrors.IsUnauthorized(err):
		// cmd adds which credentials were refused.
	case apierrors.IsForbidden(err):
		hint = "the credentials in use may not list or watch this resource; check with \"kubectl auth can-i watch " + l.resourceName() + "\""
	case apierrors.IsNotFound(err):
		if l.opt.Raw != "" {
			hint = "no such path on this server: \"kubectl get --raw /api\" and \"kubectl api-resources\" show what it serves"
		} else {
			hint = "the server does not serve this path: is the namespace right (-n), and is the resource still served (\"kubectl api-resources\")?"
		}
	case apierrors.IsMethodNotSupported(err):
		hint = "this resource cannot be watched (\"kubectl api-resources -o wide\" lists the verbs of each)"
	case apierrors.IsNotAcceptable(err), apierrors.IsUnsupportedMediaType(err):
		hint = "the server cannot send this resource in the media type asked for"
	case code == 500 && strings.HasPrefix(se.Status().Message, "resourceVersion: Invalid value"):
		return fmt.Errorf("%s: the API server says resourceVersion %q is not valid (500 Internal Server Error): --resource-version takes a "+
			"version the server gave, e.g. the one on a LIST line or in an event; leave it out to list first", what, l.rawRV())
	case apierrors.IsBadRequest(err), apierrors.IsInvalid(err):
		hint = "check the selectors (-l, --field-selector)"
		if l.opt.ResourceVersion != "" {
			hint += " and --resource-version"
		}
	case code == 0 && l.stats.Opened == 0 && l.stats.Lists == 0 && isDialError(err):
		// Not reached once: as kubectl, give up at once rather than
		// retry a server that was never there.
		return fmt.Errorf("%s: %w (cannot reach the server)", what, err)
	default:
		return nil
	}
	if hint == "" {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w (%s)", what, err, hint)
}

// isDialError reports whether err is a failure to connect (refused, no
// route, no such host, a dial timeout), as opposed to a connection that
// failed later.
func isDialError(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return true
	}
	var de *net.DNSError
	return errors.As(err, &de)
}

func (l *loop) retry(ctx context.Context, err error, b *wait.Backoff) {
	d := b.Step()
	// 429 Too Many Requests (and some 5xx) say how long to wait.
	if s, ok := apierrors.SuggestsClientDelay(err); ok && s > 0 {
		d = max(d, time.Duration(s)*time.Second)
	}
	l.stats.Retries++
	l.lastErr = event.WithoutData(err).Error()
	l.emit(&record.Retry{Time: time.Now(), Error: l.lastErr, Wait: d})
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (l *loop) listOptions() metav1.ListOptions {
	o := metav1.ListOptions{LabelSelector: l.opt.LabelSelector, FieldSelector: l.opt.FieldSelector}
	if l.opt.Name != "" {
		sel := "metadata.name=" + l.opt.Name
		if o.FieldSelector != "" {
			sel = o.FieldSelector + "," + sel
		}
		o.FieldSelector = sel
	}
	return o
}

func (l *loop) list(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	dc, err := l.c.dynamic()
	if err != nil {
		return nil, err
	}
	r := dc.Resource(l.opt.Resource.GVR)
	if l.opt.Resource.Namespaced && l.opt.Namespace != "" {
		return r.Namespace(l.opt.Namespace).List(ctx, o)
	}
	return r.List(ctx, o)
}

// doList lists through the ListWatch and, on a re-list, reports what
// changed since the state the watch had built.
func (l *loop) doList(ctx context.Context, reason cause) error {
	start := time.Now()
	obj, err := l.lw.ListWithContext(ctx, l.listOptions())
	if err != nil {
		return err
	}
	l.stats.Lists++
	lm, err := meta.ListAccessor(obj)
	if err != nil {
		return err
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		return err
	}
	fresh := make(map[string]record.Version, len(items))
	for _, it := range items {
		a, err := meta.Accessor(it)
		if err != nil {
			continue
		}
		fresh[key(a.GetNamespace(), a.GetName())] = record.Version{UID: string(a.GetUID()), ResourceVersion: a.GetResourceVersion()}
	}
	lr := &record.List{Time: time.Now(), Scope: l.scope(), Items: len(items), ResourceVersion: lm.GetResourceVersion(),
		Duration: time.Since(start), Reason: reason.text, Why: reason.why, Show: l.opt.ShowList && l.opt.ListObjects}
	if l.opt.ListObjects {
		for _, it := range items {
			a, err := meta.Accessor(it)
			if err != nil {
				continue
			}
			js, err := json.Marshal(it)
			if err != nil {
				continue
			}
			if !l.c.httpOpt.Decode.ShowSecrets {
				if l.opt.Resource.CoreSecrets() {
					// A LIST of secrets holds Secrets whatever its
					// items say they are.
					js = event.RedactSecretObject(js)
				} else {
					js = event.RedactObject(js)
				}
			}
			gvk := it.GetObjectKind().GroupVersionKind()
			lr.Objects = append(lr.Objects, record.Object{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind,
				Namespace: a.GetNamespace(), Name: a.GetName(), UID: string(a.GetUID()),
				ResourceVersion: a.GetResourceVersion(), JSON: js})
		}
	}
	l.emit(lr)
	if reason.why == record.WhyInitial {
		l.absent(ctx, len(fresh))
	}
	if reason.why != record.WhyInitial {
		// A re-list, whatever started it (after 410 Gone, also when the
		// run began from --resource-version and has no state to compare).
		l.stats.Relists++
	}
	if l.listed {
		l.emit(diffStates(l.known, fresh))
	}
	l.listed = true
	l.known = fresh
	l.setRV(lm.GetResourceVersion())
	return nil
}

// scope says what the list-watch covers; the zero Scope for --raw.
func (l *loop) scope() record.Scope {
	if l.opt.Raw != "" {
		return record.Scope{}
	}
	o := l.listOptions()
	return record.Scope{Resource: l.opt.Resource.String(), Namespace: l.opt.Namespace,
		AllNamespaces: l.opt.AllNamespaces && l.opt.Namespace == "",
		LabelSelector: o.LabelSelector, FieldSelector: o.FieldSelector}
}

func key(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// diffStates compares the state known from the watch with a new list.
func diffStates(old, fresh map[string]record.Version) *record.Relist {
	r := &record.Relist{Time: time.Now()}
	r.CompareStates(old, fresh, false)
	return r
}

// watchOnce opens one watch from l.rv and consumes it until it ends. It
// returns errGone when the server says the version is too old.
func (l *loop) watchOnce(ctx context.Context, reason cause) error {
	o := l.listOptions()
	o.ResourceVersion = l.rv
	o.AllowWatchBookmarks = true
	o.Watch = true
	l.wasWatchList = l.watchList
	if l.watchList {
		// A streaming list: the current state, then the changes; what
		// the watch resumes from later is a plain watch.
		t := true
		o.SendInitialEvents = &t
		o.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
		l.watchList = false
	}
	if l.opt.TimeoutSeconds > 0 {
		ts := l.opt.TimeoutSeconds
		o.TimeoutSeconds = &ts
	}
	var after time.Duration
	if !l.started.IsZero() {
		after = time.Since(l.started)
	}
	l.stats.Watches++
	from := l.rv
	if l.opt.Raw != "" {
		from = l.rawRV() // the version in the path, until one is seen
	}
	l.emit(&record.WatchStart{Time: time.Now(), Scope: l.scope(), Number: int(l.c.watchNos.Add(1)), Path: l.path(o), ResourceVersion: from,
		Reason: reason.text, Why: reason.why, WatchList: reason.watchList, After: after, Transport: l.c.Transport})
	started := time.Now()
	l.started = started
	l.lastEnd, l.lastEvents = "", 0
	w, err := l.lw.WatchWithContext(ctx, o)
	if err != nil {
		if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
			return errGone
		}
		return err
	}
	l.stats.Opened++
	var stalled atomic.Bool // set by the watchdog when it ends this watch
	ww, _ := w.(*wireWatcher)
	defer func() {
		w.Stop()
		// Let the connection's reader report how the body ended before
		// anything else is printed.
		if ww != nil {
			ww.abandon()
			select {
			case <-ww.finished:
			case <-time.After(5 * time.Second):
			}
			ww.mu.Lock()
			l.lastEnd, l.lastWatch = ww.endHow, ww.endWatch
			ww.mu.Unlock()
		}
		if stalled.Load() {
			l.stalled = true
		}
	}()
	if l.opt.IdleTimeout > 0 {
		stop := make(chan struct{})
		defer close(stop)
		var finished <-chan struct{}
		if ww != nil {
			finished = ww.finished
		}
		go l.watchdog(w, l.c.sink.clock.Now(), stop, finished, &stalled)
	}
	var heard atomic.Int64 // the sink's clock at the last event or bookmark
	heard.Store(l.c.sink.clock.Now().UnixNano())
	if l.opt.QuietAfter > 0 && o.AllowWatchBookmarks {
		stop := make(chan struct{})
		defer close(stop)
		go l.quiet(ctx, o.ResourceVersion, &heard, stop)
	}
	for ev := range w.ResultChan() {
		heard.Store(l.c.sink.clock.Now().UnixNano())
		l.lastEvents++
		if err := l.apply(ctx, ev); err != nil {
			return err
		}
	}
	return nil
}

// quiet says, once, that the watch from resourceVersion from (the one it
// asked for; the loop's latest when it heard some) heard no event or
// bookmark for QuietAfter (see WatchOptions.QuietAfter), until stop is
// closed. It asks the server for its current resourceVersion (a LIST of
// one item, as the loop lists) to say why.
func (l *loop) quiet(ctx context.Context, from string, heard *atomic.Int64, stop <-chan struct{}) {
	l.every(l.opt.QuietAfter/8, stop, func() bool {
		d := l.c.sink.clock.Since(time.Unix(0, heard.Load()))
		if d < l.opt.QuietAfter {
			return false
		}
		p := &record.Problem{Time: time.Now(), Offset: -1, Kind: KindQuiet, Warning: true,
			Detail: fmt.Sprintf("no event and no bookmark for %s, though the watch asked for bookmarks (kube-apiserver sends one about every minute)", d.Round(time.Second)),
			Hint:   "a quiet resource gets bookmarks all the same: look at the API server and the path between (--idle-timeout ends a watch that reads no byte)"}
		if rv := l.rvNow(); rv != "" && from != "" {
			if cur, ok := l.serverRV(ctx); ok {
				if cmp, err := resourceversion.CompareResourceVersion(rv, cur); err == nil && cmp > 0 {
					p.Detail += fmt.Sprintf("; it watches from resourceVersion %s, ahead of the server's current %s", rv, cur)
					p.Hint = "the cluster's etcd was restored or reset: versions from before it are not reached again, and the watch waits for them in vain, as an informer would; watch again from the current state (kwatch stream without --resource-version), as a restarted controller does"
				}
			}
		}
		l.emit(p)
		return true
	})
}

// every calls check each period (at least 10 ms) on the sink's clock until
// check returns true or stop is closed.
func (l *loop) every(period time.Duration, stop <-chan struct{}, check func() bool) {
	tick := l.c.sink.clock.NewTicker(max(period, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C():
		}
		if check() {
			return
		}
	}
}

// KindQuiet is the Problem kind (a warning) of a watch that asked for
// bookmarks and heard neither an event nor a bookmark for
// WatchOptions.QuietAfter.
const KindQuiet = "watch quiet"

// setRV sets the resourceVersion reached.
func (l *loop) setRV(rv string) {
	l.rvMu.Lock()
	l.rv = rv
	l.rvMu.Unlock()
}

// rvNow returns the resourceVersion the watch has reached, read while the
// loop applies events.
func (l *loop) rvNow() string {
	l.rvMu.Lock()
	defer l.rvMu.Unlock()
	return l.rv
}

// serverRV returns the server's current resourceVersion for the
// resource watched: that of a LIST of one item, read from etcd (no
// resourceVersion: the most recent).
func (l *loop) serverRV(ctx context.Context) (string, bool) {
	if l.opt.Raw != "" {
		return "", false // a raw path: no resource to list
	}
	o := l.listOptions()
	o.Limit = 1
	obj, err := l.list(ctx, o)
	if err != nil {
		return "", false
	}
	lm, err := meta.ListAccessor(obj)
	if err != nil || lm.GetResourceVersion() == "" {
		return "", false
	}
	return lm.GetResourceVersion(), true
}

// watchdog stops watch w, started at started (on the sink's clock), when no
// byte has been read or decoded for IdleTimeout, and sets *stalled. It does
// nothing once stop is closed (the loop is done with w) or finished is (w's body was read to
// its end): checked under the sink's lock as the problem is printed, so a
// watchdog that had to wait for the lock never reports a watch that has
// ended meanwhile, nor one whose bytes were waiting for kwatch's own
// output to move.
func (l *loop) watchdog(w watch.Interface, started time.Time, stop, finished <-chan struct{}, stalled *atomic.Bool) {
	clk := l.c.sink.clock
	l.every(l.opt.IdleTimeout/8, stop, func() bool {
		idle := func() time.Duration {
			last := time.Unix(0, l.c.sink.lastActive.Load())
			if last.Before(started) {
				last = started
			}
			return clk.Since(last)
		}
		if idle() < l.opt.IdleTimeout {
			return false
		}
		if tr := l.c.sink.watchdogTrace; tr != nil {
			tr("judging")
		}
		// Judged again under the sink's lock: when kwatch's own output
		// is held up (a full pipe, a paused terminal), the decoder holds
		// the lock, the reads wait for it, and the bytes it decodes once
		// the output moves count as activity: the server did not stall.
		reported := l.c.sink.emitWhen(func() record.Record {
			d := idle()
			if d < l.opt.IdleTimeout {
				return nil
			}
			return &record.Problem{Time: time.Now(), Offset: -1, Kind: "watch stalled",
				Detail: fmt.Sprintf("no byte for %s (--idle-timeout)", d.Round(time.Millisecond)),
				Hint:   "closing the watch and watching again from the last resourceVersion"}
		}, stop, finished)
		if tr := l.c.sink.watchdogTrace; tr != nil {
			tr(map[bool]string{true: "reported", false: "cleared"}[reported])
		}
		if reported {
			stalled.Store(true)
			w.Stop()
			return true
		}
		select {
		case <-stop:
			return true
		case <-finished:
			return true
		default:
			return false
		}
	})
}

// apply updates the loop's state from one event.
func (l *loop) apply(ctx context.Context, ev watch.Event) error {
	l.stats.Events++
	if ev.Type == watch.Error {
		st, ok := ev.Object.(*metav1.Status)
		if ok && (st.Code == 410 || st.Reason == metav1.StatusReasonExpired || st.Reason == metav1.StatusReasonGone) {
			return errGone
		}
		if ok {
			return apierrors.FromObject(st)
		}
		return fmt.Errorf("watch ERROR event")
	}
	a, err := meta.Accessor(ev.Object)
	if err != nil {
		return nil
	}
	if rv := a.GetResourceVersion(); rv != "" {
		l.setRV(rv)
	}
	k := key(a.GetNamespace(), a.GetName())
	if l.collecting != nil {
		if ev.Type == watch.Added {
			l.collecting[k] = record.Version{UID: string(a.GetUID()), ResourceVersion: a.GetResourceVersion()}
			return nil
		}
		if ev.Type == watch.Bookmark && a.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
			return nil // a progress bookmark inside the initial state
		}
		// The initial state is complete: at its bookmark, or, from a
		// server that sends none, at the first other event.
		if l.listed {
			l.emit(diffStates(l.known, l.collecting))
		} else {
			l.absent(ctx, len(l.collecting))
		}
		l.known, l.collecting, l.listed = l.collecting, nil, true
		if ev.Type == watch.Bookmark {
			return nil
		}
	}
	switch ev.Type {
	case watch.Added, watch.Modified:
		l.known[k] = record.Version{UID: string(a.GetUID()), ResourceVersion: a.GetResourceVersion()}
	case watch.Deleted:
		delete(l.known, k)
	}
	return nil
}

// path returns the watch request's path and query, for display.
func (l *loop) path(o metav1.ListOptions) string {
	if l.opt.Raw != "" {
		return l.rawPath(o.ResourceVersion)
	}
	g := l.opt.Resource.GVR
	var sb strings.Builder
	if g.Group == "" {
		sb.WriteString("/api/" + g.Version)
	} else {
		sb.WriteString("/apis/" + g.Group + "/" + g.Version)
	}
	if l.opt.Resource.Namespaced && l.opt.Namespace != "" {
		sb.WriteString("/namespaces/" + l.opt.Namespace)
	}
	sb.WriteString("/" + g.Resource)
	q := url.Values{}
	q.Set("watch", "true")
	q.Set("allowWatchBookmarks", "true")
	if o.ResourceVersion != "" {
		q.Set("resourceVersion", o.ResourceVersion)
	}
	if o.SendInitialEvents != nil {
		q.Set("sendInitialEvents", strconv.FormatBool(*o.SendInitialEvents))
	}
	if o.ResourceVersionMatch != "" {
		q.Set("resourceVersionMatch", string(o.ResourceVersionMatch))
	}
	if o.LabelSelector != "" {
		q.Set("labelSelector", o.LabelSelector)
	}
	if o.FieldSelector != "" {
		q.Set("fieldSelector", o.FieldSelector)
	}
	if o.TimeoutSeconds != nil {
		q.Set("timeoutSeconds", strconv.FormatInt(*o.TimeoutSeconds, 10))
	}
	return sb.String() + "?" + q.Encode()
}

// rawPath adds or replaces resourceVersion in the --raw path for a resume.
func (l *loop) rawPath(rv string) string {
	u, err := url.Parse(l.opt.Raw)
	if err != nil || rv == "" {
		return l.opt.Raw
	}
	q := u.Query()
	q.Set("resourceVersion", rv)
	if q.Get("watch") == "" && !strings.Contains(u.Path, "/watch/") {
		q.Set("watch", "true")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// watch opens a watch request on the tapped client and returns a
// watch.Interface fed with the events kwatch's decoder reads off the wire.
func (l *loop) watch(ctx context.Context, rc restGetter, o metav1.ListOptions) (watch.Interface, error) {
	full := l.path(o)
	u, err := url.Parse(full)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	req := rc.Get().AbsPath(u.Path)
	for k, vs := range u.Query() {
		for _, v := range vs {
			req = req.Param(k, v)
		}
	}
	accept := event.MediaJSON
	switch {
	case l.opt.Proto:
		accept = event.MediaProtobuf + ";stream=watch"
	case l.opt.CBOR:
		accept = event.MediaCBOR
	}
	req = req.SetHeader("Accept", accept)
	ww := newWireWatcher(cancel)
	l.c.sink.mu.Lock()
	l.c.sink.expect(u.Path, ww)
	l.c.sink.mu.Unlock()
	// Learn which connection carries the request: over HTTP/1.1 it is a
	// tapped one, and the watch is over only when that connection's bytes,
	// and how it ended, have all been decoded; with HTTP/2 the tap sees no
	// bytes, and the endpoints come from net/http.
	var conn net.Conn
	var connMu sync.Mutex
	wctx = httptrace.WithClientTrace(wctx, &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		connMu.Lock()
		conn = info.Conn
		connMu.Unlock()
	}})
	// settle closes the request's tapped connection and waits until it
	// has been decoded to its end, so that the response (an error status
	// too) and how its body ended are printed before whatever the loop
	// prints next.
	settle := func() {
		connMu.Lock()
		tc, _ := conn.(*tapConn)
		connMu.Unlock()
		switch {
		case tc == nil:
		case l.c.http2:
			// HTTP/2: other watches may share the connection; the
			// stream's end (END_STREAM, or the RST_STREAM kwatch sent)
			// says the watch is over, or the connection's.
			select {
			case <-ww.ended:
			case <-tc.decoded:
			}
		default:
			tc.closeAndWait()
		}
	}
	body, err := req.Stream(wctx)
	if err != nil {
		cancel()
		settle()
		return nil, err
	}
	go func() {
		defer ww.finish()
		_, _ = io.Copy(io.Discard, body)
		body.Close()
		settle()
		// The tap decodes on goroutines of its own: let it catch up with
		// every byte read, so that the watch's events and how it ended
		// are all known before the loop goes on.
		l.c.sink.drain()
	}()
	return ww, nil
}

// restGetter starts GET requests (rest.RESTClient).
type restGetter interface{ Get() *rest.Request }

// wireWatcher is a watch.Interface fed by the tap's decoded events. The
// queue is unbounded so that the goroutine reading the connection never
// blocks while holding the sink's lock.
type wireWatcher struct {
	mu       sync.Mutex
	queue    []watch.Event
	done     bool
	wake     chan struct{}
	out      chan watch.Event
	finished chan struct{} // closed when the body has been read to its end
	gone     chan struct{} // closed when the loop reads no more events (abandon)
	endHow   string        // how the body ended (record.End.How)
	endWatch bool          // the body was a watch stream
	ended    chan struct{} // closed when the End record of its exchange was delivered
	endOnce  sync.Once
	cancel   context.CancelFunc
	goneOnce sync.Once
}

// outQueue is how many events the pump may hand to ResultChan ahead of the
// loop: with an unbuffered channel every event is a goroutine switch, which
// cost a tenth of kwatch stream's CPU on a fast watch (bench/replay).
const outQueue = 256

func newWireWatcher(cancel context.CancelFunc) *wireWatcher {
	w := &wireWatcher{wake: make(chan struct{}, 1), out: make(chan watch.Event, outQueue),
		finished: make(chan struct{}), gone: make(chan struct{}), ended: make(chan struct{}), cancel: cancel}
	go w.pump()
	return w
}

func (w *wireWatcher) push(ev watch.Event) {
	w.mu.Lock()
	w.queue = append(w.queue, ev)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *wireWatcher) finish() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
	close(w.finished)
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// pump hands the queued events to ResultChan, in order, until the body
// has ended and every event decoded from it has been handed over. Stop
// does not cut this short: events decoded after it (the bytes already
// read) have been printed, and the loop must see them too, or it would
// resume from an older resourceVersion than the last event shown. Only
// abandon (the loop reads no more) does.
func (w *wireWatcher) pump() {
	defer close(w.out)
	for {
		w.mu.Lock()
		q := w.queue
		w.queue = nil
		done := w.done
		w.mu.Unlock()
		for _, ev := range q {
			select {
			case w.out <- ev:
			case <-w.gone:
				return
			}
		}
		if done && len(q) == 0 {
			return
		}
		if len(q) == 0 {
			select {
			case <-w.wake:
			case <-w.gone:
				return
			}
		}
	}
}

// abandon tells the pump that the loop reads no more events.
func (w *wireWatcher) abandon() {
	w.goneOnce.Do(func() { close(w.gone) })
}

// Stop ends the watch and closes its connection (a context.CancelFunc may
// be called more than once).
func (w *wireWatcher) Stop() { w.cancel() }

// ResultChan returns the events.
func (w *wireWatcher) ResultChan() <-chan watch.Event { return w.out }

// toWatchEvent turns a decoded event record into a watch.Event whose object
// carries the identity the loop needs.
func toWatchEvent(e *record.Event) watch.Event {
	if e.Type == string(watch.Error) && e.Status != nil {
		return watch.Event{Type: watch.Error, Object: e.Status}
	}
	obj := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: e.APIVersion, Kind: e.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: e.Name, Namespace: e.Namespace, ResourceVersion: e.ResourceVersion,
			UID: types.UID(e.UID)},
	}
	if e.InitialEventsEnd {
		obj.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	}
	return watch.Event{Type: watch.EventType(e.Type), Object: obj}
}
