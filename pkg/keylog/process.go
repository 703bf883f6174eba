package keylog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"

	"github.com/kwatch/kwatch/pkg/record"
)

// ProcessPrefix starts the key log comment line that carries the processes
// kwatch attach knew at a connection's ends (ProcessLine), in a recording's
// Decryption Secrets Block: a comment to every other reader of key logs,
// read back by kwatch pcap, which names the connection's client and server
// processes as kwatch attach did.
const ProcessPrefix = "# kwatch-process v1 "

// maxProcessConns bounds the connections a Log holds processes of; past it
// the memory is emptied (a recording names each connection's processes
// ahead of its packets: only the connections about to be read need them).
const maxProcessConns = 1 << 14

// maxProcessLine bounds a process line read back (bytes): a few processes
// with their names and pod and container IDs take some hundred.
const maxProcessLine = 4096

// Processes is what ProcessLine writes of a connection: its endpoints, the
// note kwatch attach showed ("client kube-controller-manager (pid 812)")
// and the processes at its ends.
type Processes struct {
	Client, Server netip.AddrPort
	Message        string
	Processes      []record.ConnProcess
}

// processJSON is the JSON of a process line, after its endpoints.
type processJSON struct {
	Message   string               `json:"message"`
	Processes []record.ConnProcess `json:"processes"`
}

// ProcessLine returns p as one key log comment line, LF-terminated:
// "# kwatch-process v1 CLIENT SERVER {"message":…,"processes":[…]}" (the
// processes as kwatch's JSON Lines write them, docs/json.md).
func ProcessLine(p Processes) []byte {
	j, _ := json.Marshal(processJSON{Message: p.Message, Processes: p.Processes}) // strings and numbers only
	return fmt.Appendf(nil, "%s%s %s %s\n", ProcessPrefix, p.Client, p.Server, j)
}

// parseProcess reads a line ProcessLine wrote (without its LF).
func parseProcess(line []byte) (Processes, error) {
	if len(line) > maxProcessLine {
		return Processes{}, fmt.Errorf("kwatch-process line of %d bytes, more than %d", len(line), maxProcessLine)
	}
	f := bytes.SplitN(bytes.TrimPrefix(line, []byte(ProcessPrefix)), []byte(" "), 3)
	if len(f) != 3 {
		return Processes{}, fmt.Errorf("kwatch-process line of %d fields, want 3", len(f))
	}
	var p Processes
	var err error
	if p.Client, p.Server, err = parseEnds("kwatch-process", f[0], f[1]); err != nil {
		return Processes{}, err
	}
	var j processJSON
	if err := json.Unmarshal(f[2], &j); err != nil {
		return Processes{}, fmt.Errorf("kwatch-process processes: %v", err)
	}
	if j.Message == "" {
		return Processes{}, fmt.Errorf("kwatch-process line without a message")
	}
	p.Message, p.Processes = j.Message, j.Processes
	return p, nil
}

// addProcesses keeps p by its connection's endpoints. l.mu is held.
func (l *Log) addProcesses(p Processes) {
	if l.processes == nil || len(l.processes) >= maxProcessConns {
		l.processes = map[[2]netip.AddrPort]*Processes{}
	}
	l.processes[[2]netip.AddrPort{p.Client, p.Server}] = &p
}

// Processes returns what a recording's process line said of the
// connection from client to server (pcap.Options.Owner's shape): the note
// and the processes at its ends; "" and nil when none did.
func (l *Log) Processes(client, server netip.AddrPort) (string, []record.ConnProcess) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.processes[[2]netip.AddrPort{client, server}]
	if p == nil {
		return "", nil
	}
	return p.Message, p.Processes
}
