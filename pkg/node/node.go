// Package node runs kwatch on a cluster's nodes through Kubernetes itself,
// from anywhere kubectl works (kwatch attach|pcap -i --node, --all-nodes,
// pod/NAME): for each node a pod of kwatch's image (PodSpec) runs the same
// kwatch, which writes its records as JSON Lines (docs/json.md, the
// contract between the two ends) on the stdout of a pods/exec stream
// (client-go's WebSocket executor, SPDY for older API servers). This
// kwatch reads each node's stream back into records (printer.JSONReader),
// tells a stream that ended before its last record from one that ended,
// merges the nodes in time order (pkg/merge) and hands the records to the
// sink as any source does: the same printers, health, --diff and report.
// Every pod it made is deleted at the end, on an error, and on Ctrl-C.
package node

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/exec"

	"github.com/kwatch/kwatch/pkg/merge"
	"github.com/kwatch/kwatch/pkg/phrase"
	"github.com/kwatch/kwatch/pkg/printer"
	"github.com/kwatch/kwatch/pkg/record"
)

// Defaults of Options.
const (
	// DefaultDeadline is the pods' activeDeadlineSeconds.
	DefaultDeadline = 24 * time.Hour
	// DefaultRunningTimeout is how long a pod may take to run (kubectl's
	// --pod-running-timeout default).
	DefaultRunningTimeout = time.Minute
	// DefaultIdle is how long a pod outlives the last kwatch run in it.
	DefaultIdle = time.Minute
	// stopWait is how long kwatch on the nodes has to end, once told
	// (Ctrl-C), before their streams are cut.
	stopWait = 10 * time.Second
)

// KindStreamCut is the Problem kind of a node's stream that ended before
// its last record: what that node saw after it is not shown.
const KindStreamCut = "node stream ended early"

// Exec runs command in the kwatch container of pod with these streams
// until it exits or ctx ends; the error of a command that exited with a
// status other than 0 is a k8s.io/client-go/util/exec.ExitError. NewExec
// makes the one of a cluster; tests pass their own.
type Exec func(ctx context.Context, pod *corev1.Pod, command []string, stdin io.Reader, stdout, stderr io.Writer) error

// Target is a pod named on the command line (pod/NAME, deploy/NAME): its
// containers' processes are attached to, on its node.
type Target struct {
	// Kind is "pod" or "deployment".
	Kind string
	// Namespace and Name name it; Arg is the argument as given.
	Namespace, Name, Arg string
}

// Options say where to run kwatch and what it runs.
type Options struct {
	// Client reaches the cluster; Exec runs commands in pods.
	Client kubernetes.Interface
	Exec   Exec
	// Nodes are nodes by name (--node); AllNodes every Linux node, or
	// those of Selector (a label selector, --node-selector).
	Nodes    []string
	AllNodes bool
	Selector string
	// Pods are pods and deployments whose containers to attach to.
	Pods []Target
	// Command is what kwatch runs on each node, without "kwatch" and the
	// names: ["attach", flags…] or ["pcap", "-i", "any", flags…]; Names
	// are the processes it attaches to on the nodes of Nodes, AllNodes
	// and Selector (for kwatch attach).
	Command []string
	Names   []string
	// Profile is the pod's (ProfileAttach, ProfileCapture).
	Profile Profile
	// Namespace is where the pods go; Own says it is kwatch's own, made
	// when missing (DefaultNamespace), rather than one the user named,
	// which must exist.
	Namespace string
	Own       bool
	// Image and PullPolicy are the pods' image.
	Image      string
	PullPolicy corev1.PullPolicy
	// Deadline (the pods' activeDeadlineSeconds), RunningTimeout (how
	// long a pod may take to run) and Idle (how long a pod outlives the
	// last kwatch run in it); defaults when 0.
	Deadline, RunningTimeout, Idle time.Duration
	// Description says what the run is, in the pods' annotation.
	Description string
	// Notice is told what happens, a line at a time.
	Notice func(line string)
	// Window is the merge's (merge.Options.Window).
	Window time.Duration
}

// Result says what a Run did.
type Result struct {
	// Nodes are the nodes kwatch ran on, in the order they were planned.
	Nodes []*NodeRun
	// Merge are the merge's counts.
	Merge merge.Stats
	// Summary sums the nodes' summaries (as handed to the sink last).
	Summary *record.Summary
	// Cut counts the streams that ended before their last record.
	Cut int
}

// NodeRun is what kwatch did on one node.
type NodeRun struct {
	Node string
	// Pod is the pod's name; Args what kwatch ran in it.
	Pod  string
	Args []string
	// Start, Summary and Exit are the stream's first, summary and last
	// records (nil when not read).
	Start   *record.Start
	Summary *record.Summary
	Exit    *record.Exit
	// Records counts the records read; Skipped the lines of kinds this
	// kwatch does not know.
	Records, Skipped int
	// Skip says why the node was left out after all (--all-nodes: no
	// process there); "" for a node that ran.
	Skip string
}

// Run runs kwatch on the nodes of opt, hands their records to sink as one
// stream, and ends with a summary record of them all; it returns when
// every node's kwatch ended (their processes exited) or after ctx ended
// (Ctrl-C: each is told to end, and has stopWait to). The error, before
// any record went to sink, says in one line why kwatch cannot run there
// and what to do: a node that does not exist or is not Linux, RBAC, PodSecurity, an
// image the node cannot get, no such process on a node named. Every pod
// made is deleted before Run returns, and waited for until gone.
func Run(ctx context.Context, opt Options, sink record.Sink) (*Result, error) {
	if opt.Deadline <= 0 {
		opt.Deadline = DefaultDeadline
	}
	if opt.RunningTimeout <= 0 {
		opt.RunningTimeout = DefaultRunningTimeout
	}
	if opt.Idle <= 0 {
		opt.Idle = DefaultIdle
	}
	if opt.Namespace == "" {
		opt.Namespace, opt.Own = DefaultNamespace, true
	}
	notice := opt.Notice
	var mu sync.Mutex
	opt.Notice = func(line string) {
		if notice != nil {
			mu.Lock()
			defer mu.Unlock()
			notice(line)
		}
	}
	s := &session{opt: opt, cs: opt.Client, run: runID()}
	defer s.cleanup()
	if err := s.preflight(ctx); err != nil {
		return nil, err
	}
	plan, err := s.plan(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.namespace(ctx); err != nil {
		return nil, err
	}
	s.leftovers(ctx)
	if err := s.start(ctx, plan); err != nil {
		return nil, err
	}
	return s.stream(ctx, plan, sink)
}

// session is one Run's state.
type session struct {
	opt Options
	cs  kubernetes.Interface
	run string
	// pods are the pods made, to delete.
	mu   sync.Mutex
	pods []*corev1.Pod
}

// runID names a run (LabelInstance): 8 random hex digits.
func runID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "kwatch-" + hex.EncodeToString(b)
}

// planned is one node to run kwatch on.
type planned struct {
	node string
	// named: the node was named (--node, or a pod's), so that no process
	// there is an error, not a node passed over.
	named bool
	// names: Options.Names apply here; containers are container IDs to
	// attach to, of pods (the pods' names, for messages).
	names      bool
	containers []string
	pods       []string
	// kubeletPort is the kubelet's port on the node, whose connections
	// kwatch there leaves out.
	kubeletPort int32
	run         *NodeRun
	pod         *corev1.Pod
}

// args are what kwatch runs on p's node.
func (s *session) args(p *planned) []string {
	args := append([]string{"kwatch"}, s.opt.Command...)
	args = append(args, "--agent")
	if p.kubeletPort > 0 {
		args = append(args, "--agent-skip-port", strconv.Itoa(int(p.kubeletPort)))
	}
	for _, id := range p.containers {
		args = append(args, "--container-id", id)
	}
	if p.names {
		args = append(args, s.opt.Names...)
	}
	return args
}

// start makes a pod on each planned node and waits until each runs.
func (s *session) start(ctx context.Context, plan []*planned) error {
	for _, p := range plan {
		pod := PodSpec(Spec{Node: p.node, Namespace: s.opt.Namespace, Image: s.opt.Image, PullPolicy: s.opt.PullPolicy,
			Profile: s.opt.Profile, Deadline: s.opt.Deadline, Idle: s.opt.Idle, Run: s.run, Description: s.opt.Description})
		made, err := s.cs.CoreV1().Pods(s.opt.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			return s.createError(err)
		}
		s.mu.Lock()
		s.pods = append(s.pods, made)
		s.mu.Unlock()
		p.pod = made
		p.run.Pod = made.Name
	}
	errs := make([]error, len(plan))
	var wg sync.WaitGroup
	for i, p := range plan {
		wg.Go(func() {
			pod, err := s.waitRunning(ctx, p.pod)
			if err == nil {
				p.pod = pod
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// cleanup deletes the pods made, and waits until they are gone.
func (s *session) cleanup() {
	s.mu.Lock()
	pods := s.pods
	s.pods = nil
	s.mu.Unlock()
	if len(pods) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if left := deletePods(ctx, s.cs, pods); len(left) > 0 {
		s.opt.Notice(fmt.Sprintf("could not delete %s: %s (kwatch node clean -n %s removes them)",
			phrase.Count(len(left), "pod", "pods"), strings.Join(left, "; "), s.opt.Namespace))
	}
}

// deletePods deletes pods (with a grace period of 1 s, as kubectl delete
// --now) and waits until they are gone; it returns what could not be
// deleted, each with why.
func deletePods(ctx context.Context, cs kubernetes.Interface, pods []*corev1.Pod) []string {
	grace := int64(1)
	var left []string
	var gone []*corev1.Pod
	for _, p := range pods {
		err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		if err != nil && !apierrors.IsNotFound(err) {
			left = append(left, fmt.Sprintf("%s/%s: %v", p.Namespace, p.Name, err))
			continue
		}
		gone = append(gone, p)
	}
	for _, p := range gone {
		for {
			_, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if ctx.Err() != nil {
				left = append(left, fmt.Sprintf("%s/%s: still there after its deletion", p.Namespace, p.Name))
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
	return left
}

// item is what a node's stream hands the main loop: a record, a line
// that is not one, the end of its records, the end of its exec.
type item struct {
	node    int
	rec     record.Record
	readErr error
	// eof: its stdout ended (cut: inside a line); exec: its exec ended,
	// with execErr.
	eof, cut bool
	exec     bool
	execErr  error
	// stderr is a line kwatch there wrote on stderr.
	stderr string
}

// stream is one node's stream as the main loop follows it.
type stream struct {
	p *planned
	// stdin ends kwatch there when closed.
	stdin  *io.PipeWriter
	cancel context.CancelFunc
	// started: its Start record came; held: its records until every
	// node started.
	started bool
	decided bool
	held    []record.Record
	src     int
	eof     bool
	cut     bool
	exec    bool
	execErr error
	last    time.Time
	stderr  []string
	ended   bool
	// merged: the merge was told the stream ended.
	merged bool
}

// stream runs kwatch in each pod and merges what they write into sink.
func (s *session) stream(ctx context.Context, plan []*planned, sink record.Sink) (*Result, error) {
	items := make(chan item, 64)
	streams := make([]*stream, len(plan))
	execCtx, stopAll := context.WithCancel(context.Background())
	defer stopAll()
	var wg sync.WaitGroup
	defer func() {
		stopAll()
		for _, st := range streams {
			if st != nil {
				st.stdin.Close()
			}
		}
		go func() { // drain what the goroutines still send
			for range items {
			}
		}()
		wg.Wait()
		close(items)
	}()
	for i, p := range plan {
		st := &stream{p: p}
		streams[i] = st
		var inR *io.PipeReader
		inR, st.stdin = io.Pipe()
		outR, outW := io.Pipe()
		errR, errW := io.Pipe()
		var c context.Context
		c, st.cancel = context.WithCancel(execCtx)
		args := s.args(p)
		p.run.Args = args
		s.opt.Notice(fmt.Sprintf("node %s: pod %s/%s runs %s", p.node, p.pod.Namespace, p.pod.Name, strings.Join(args, " ")))
		wg.Go(func() {
			err := s.opt.Exec(c, p.pod, args, inR, outW, errW)
			outW.Close()
			errW.Close()
			inR.Close()
			items <- item{node: i, exec: true, execErr: err}
		})
		wg.Go(func() {
			jr := printer.NewJSONReader(outR, printer.ReadOptions{Node: p.node, Unnumbered: true})
			defer outR.Close()
			for {
				rec, err := jr.Next()
				var re *printer.ReadError
				switch {
				case err == nil:
					items <- item{node: i, rec: rec}
				case errors.Is(err, io.ErrUnexpectedEOF):
					items <- item{node: i, eof: true, cut: true}
					p.run.Skipped = jr.Skipped()
					return
				case errors.As(err, &re):
					items <- item{node: i, readErr: err}
				default:
					p.run.Skipped = jr.Skipped()
					items <- item{node: i, eof: true}
					return
				}
			}
		})
		wg.Go(func() {
			sc := bufio.NewScanner(errR)
			sc.Buffer(make([]byte, 0, 4096), 64<<10)
			for sc.Scan() {
				items <- item{node: i, stderr: sc.Text()}
			}
			_, _ = io.Copy(io.Discard, errR)
		})
	}
	m := merge.New(sink, merge.Options{Window: s.opt.Window})
	for _, st := range streams {
		st.src = m.Add(st.p.node)
	}
	res := &Result{}
	for _, p := range plan {
		res.Nodes = append(res.Nodes, p.run)
	}
	// Until every node's kwatch has begun (or failed), nothing is handed
	// on: a refusal is said alone.
	gate := time.NewTimer(s.opt.RunningTimeout)
	defer gate.Stop()
	open := len(streams)
	decided := 0
	var stopping <-chan time.Time
	done := ctx.Done()
	tick := time.NewTimer(time.Hour)
	defer tick.Stop()
	for open > 0 {
		if len(items) == 0 {
			// What was handed on is shown before waiting for more, as a
			// capture read live is (record.Flusher).
			record.Flush(sink)
		}
		select {
		case it := <-items:
			st := streams[it.node]
			switch {
			case it.stderr != "":
				line := strings.TrimPrefix(it.stderr, "kwatch: ")
				st.stderr = append(st.stderr, line)
				if len(st.stderr) > 8 {
					st.stderr = st.stderr[1:]
				}
				s.opt.Notice(fmt.Sprintf("node %s: %s", st.p.node, line))
			case it.rec != nil:
				st.p.run.Records++
				if t := it.rec.When(); !t.IsZero() {
					st.last = t
				}
				switch v := it.rec.(type) {
				case *record.Start:
					st.p.run.Start = v
					if v.Schema != record.SchemaVersion {
						return nil, fmt.Errorf("node %s: kwatch %s there writes records of schema %d; this kwatch (schema %d) cannot read them: run the same version there (--image kwatch:VERSION)",
							st.p.node, v.Version, v.Schema, record.SchemaVersion)
					}
					if !st.decided {
						st.started, st.decided = true, true
						decided++
					}
				case *record.Exit:
					st.p.run.Exit = v
					if !st.decided {
						st.decided = true
						decided++
						if err := s.refused(st); err != nil {
							return nil, err
						}
					} else if v.Code == 2 {
						st.held = append(st.held, &record.Problem{Time: v.Time, Offset: -1, Kind: "kwatch on a node failed",
							Detail: fmt.Sprintf("node %s: %s", st.p.node, v.Message)})
					}
				case *record.Summary:
					st.p.run.Summary = v
				default:
					st.held = append(st.held, it.rec)
				}
			case it.readErr != nil:
				st.held = append(st.held, &record.Problem{Time: st.last, Offset: -1, Warning: true, Kind: "node stream line not read",
					Detail: fmt.Sprintf("node %s, pod %s: %v", st.p.node, st.p.run.Pod, it.readErr)})
			case it.eof:
				st.eof, st.cut = true, it.cut
			case it.exec:
				st.exec, st.execErr = true, it.execErr
			}
			if st.eof && st.exec && !st.ended {
				st.ended = true
				open--
				if !st.decided {
					st.decided = true
					decided++
					if err := s.refused(st); err != nil {
						return nil, err
					}
				} else if p := s.judge(ctx, st, stopping != nil); p != nil {
					st.held = append(st.held, p)
					res.Cut++
				}
			}
			if decided == len(streams) {
				if err := s.opened(streams); err != nil {
					return nil, err
				}
				for _, st := range streams {
					for _, r := range st.held {
						m.Push(st.src, r)
					}
					st.held = nil
					if st.ended && !st.merged {
						st.merged = true
						m.Done(st.src)
					}
				}
				if d := m.Tick(); d > 0 {
					tick.Reset(d)
				}
			}
		case <-gate.C:
			if decided < len(streams) {
				var slow []string
				for _, st := range streams {
					if !st.decided {
						slow = append(slow, st.p.node)
					}
				}
				return nil, fmt.Errorf("kwatch did not begin within %s on %s %s (see the lines above; --pod-running-timeout waits longer)",
					s.opt.RunningTimeout, phrase.Count(len(slow), "node", "nodes"), strings.Join(slow, ", "))
			}
		case <-tick.C:
			if d := m.Tick(); d > 0 {
				tick.Reset(d)
			}
		case <-done:
			// Ctrl-C: kwatch on each node is told to end (its stdin
			// closes), writes its summary and exit, and has stopWait.
			done = nil
			if decided < len(streams) {
				return nil, ctx.Err()
			}
			for _, st := range streams {
				st.stdin.Close()
			}
			stopping = time.After(stopWait)
		case <-stopping:
			stopping = nil
			for _, st := range streams {
				if !st.ended {
					st.cancel()
				}
			}
		}
	}
	m.Flush()
	record.Flush(sink)
	res.Merge = m.Stats()
	res.Summary = s.summary(res)
	sink.Emit(res.Summary)
	return res, nil
}

// refused returns the error of a node whose kwatch ended before it
// began: nil when that is no error (--all-nodes: no such process there,
// said by the node's NodeRun.Skip).
func (s *session) refused(st *stream) error {
	p := st.p
	if e := p.run.Exit; e != nil {
		if e.Kind == record.ExitNoTarget && !p.named {
			p.run.Skip = e.Message
			return nil
		}
		if e.Code != 0 {
			return fmt.Errorf("node %s: %s", p.node, e.Message)
		}
		return nil
	}
	why := "its stream ended before its first record"
	if st.execErr != nil {
		why = st.execErr.Error()
	}
	if len(st.stderr) > 0 {
		why += ": " + strings.Join(st.stderr, "; ")
	}
	return fmt.Errorf("node %s: kwatch in pod %s/%s ended before it began (%s)", p.node, p.pod.Namespace, p.pod.Name, why)
}

// opened checks, once every node's kwatch began or ended, that one runs:
// with --all-nodes, a process on no node is an error too.
func (s *session) opened(streams []*stream) error {
	var skipped []string
	for _, st := range streams {
		if st.started {
			return nil
		}
		if st.p.run.Skip != "" {
			skipped = append(skipped, st.p.run.Skip)
		}
	}
	if len(skipped) > 0 {
		return fmt.Errorf("no such process on any of the %s: %s", phrase.Count(len(streams), "node", "nodes"), skipped[0])
	}
	return errors.New("kwatch began on no node")
}

// judge says, of a stream that ended after its kwatch began, what was
// lost when it ended before its exit record: the stream was cut (the API
// server can end an exec stream early without an error,
// kubernetes/kubernetes#124571), kwatch there died, or was stopped.
func (s *session) judge(ctx context.Context, st *stream, stopped bool) *record.Problem {
	if st.p.run.Exit != nil {
		return nil
	}
	p := st.p
	at := st.last
	if at.IsZero() {
		at = time.Now()
	}
	after := "after " + at.UTC().Format("15:04:05.000000Z")
	var why, hint string
	var ee exec.ExitError
	switch {
	case stopped:
		why = fmt.Sprintf("kwatch there did not end within %s of being told", stopWait)
	case errors.As(st.execErr, &ee):
		why = fmt.Sprintf("kwatch there exited with status %d before its last record", ee.ExitStatus())
		if state := s.podState(ctx, p.pod); state != "" {
			why += " (" + state + ")"
		}
		hint = "the pod's memory limit and its events say more (kubectl describe pod -n " + p.pod.Namespace + " " + p.pod.Name + ")"
	case st.execErr != nil:
		why = "the stream broke: " + st.execErr.Error()
	default:
		why = "the stream ended without an error before kwatch there wrote its last record (the API server can end an exec stream early, kubernetes/kubernetes#124571)"
		if state := s.podState(ctx, p.pod); state != "" {
			why += "; the pod is " + state
		}
	}
	if st.cut {
		why += "; its last line was cut"
	}
	return &record.Problem{Time: at, Offset: -1, Kind: KindStreamCut, Hint: hint,
		Detail: fmt.Sprintf("node %s, pod %s/%s: %s: what it saw %s is not shown", p.node, p.pod.Namespace, p.pod.Name, why, after)}
}

// podState says in a few words how pod is now: its phase, and its
// container's state when it ended or waits.
func (s *session) podState(ctx context.Context, pod *corev1.Pod) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	p, err := s.cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	state := string(p.Status.Phase)
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Terminated != nil:
			state += fmt.Sprintf(", its container ended: %s, exit code %d", c.State.Terminated.Reason, c.State.Terminated.ExitCode)
		case c.State.Waiting != nil:
			state += ", its container waits: " + c.State.Waiting.Reason
		}
	}
	return state
}

// summary sums the nodes' summaries: packets, connections (one seen from
// two nodes once), the connections the filters left out.
func (s *session) summary(res *Result) *record.Summary {
	sum := &record.Summary{Events: map[string]int{}, Nodes: len(res.Nodes), Versions: res.Merge.Versions}
	for _, n := range res.Nodes {
		if n.Skip != "" {
			sum.Nodes--
		}
		v := n.Summary
		if v == nil {
			continue
		}
		sum.Packets += v.Packets
		sum.Connections += v.Connections
		sum.NoData += v.NoData
		if v.LeftOut != nil {
			// The connections the filters left out there (--client,
			// --server, --port); the watches are counted here, by the
			// filters' stage that reads the records.
			if sum.LeftOut == nil {
				sum.LeftOut = &record.LeftOut{}
			}
			sum.LeftOut.Connections += v.LeftOut.Connections
		}
		if v.Time.After(sum.Time) {
			sum.Time = v.Time
		}
		if v.Duration > sum.Duration {
			sum.Duration = v.Duration
		}
	}
	sum.Connections = max(sum.Connections-res.Merge.Duplicates, 0)
	return sum
}

// NodesText says on which nodes kwatch ran and how each ended, for the
// line after the summary, e.g. "2 nodes: 127.0.0.1 (exit 0), 127.0.0.2
// (exit 1)".
func (r *Result) NodesText() string {
	var parts []string
	for _, n := range r.Nodes {
		switch {
		case n.Skip != "":
			continue
		case n.Exit != nil:
			parts = append(parts, fmt.Sprintf("%s (exit %d)", n.Node, n.Exit.Code))
		default:
			parts = append(parts, n.Node+" (no exit record)")
		}
	}
	slices.Sort(parts)
	return phrase.Count(len(parts), "node", "nodes") + ": " + strings.Join(parts, ", ")
}
