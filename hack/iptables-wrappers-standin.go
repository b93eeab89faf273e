// A stand-in for sigs.k8s.io/iptables-wrappers/pkg/iptables, used by hack/k8s-tools.sh only when the
// Go module proxy does not serve that module's source (k8s.io/kubernetes v1.38 moved its
// pkg/util/iptables there). The package is Kubernetes' own pkg/util/iptables of the previous release
// (K8S_1_37 of hack/k8s-versions.sh, from the module proxy; its New, NewBestEffort and Interface
// renamed legacy*), and this file gives it the v1.38 API the Kubernetes commands call: every method
// takes a context, Restore is the previous RestoreAll with --noflush --counters (what every caller
// passed), Monitor stops with the context, and the constructors take a Mode that is not used (the
// previous package ran the iptables binary found in PATH: what DetectHostMode and
// UseInstalledMode find on the nodes here, which have no other).
//
// What runs it: kube-proxy in nftables mode only at its start (removing iptables and IPVS
// leftovers); kubelet (its canary and firewall chains); e2e.test not at all (it imports
// pkg/kubelet for constants). The binaries' version stamps name the stand-in, so they are rebuilt
// once the proxy serves the real module.

package iptables

import (
	"bytes"
	"context"
	"time"
)

// Mode says how the iptables binary is chosen (not used by the stand-in).
type Mode string

const (
	// DetectHostMode: the mode (legacy or nft) the host's rules use.
	DetectHostMode Mode = "detect-host"
	// UseInstalledMode: the iptables binary installed.
	UseInstalledMode Mode = "use-installed"
)

// Interface is the v1.38 API: the previous Interface's methods with a context.
type Interface interface {
	EnsureChain(ctx context.Context, table Table, chain Chain) (bool, error)
	FlushChain(ctx context.Context, table Table, chain Chain) error
	DeleteChain(ctx context.Context, table Table, chain Chain) error
	ChainExists(ctx context.Context, table Table, chain Chain) (bool, error)
	EnsureRule(ctx context.Context, position RulePosition, table Table, chain Chain, args ...string) (bool, error)
	DeleteRule(ctx context.Context, table Table, chain Chain, args ...string) error
	IsIPv6() bool
	Protocol() Protocol
	SaveInto(ctx context.Context, table Table, buffer *bytes.Buffer) error
	Restore(ctx context.Context, data []byte) error
	Monitor(ctx context.Context, canary Chain, tables []Table, reloadFunc func(), interval time.Duration)
}

type withContext struct{ l legacyInterface }

// New returns the Interface of one family, or the error of its Present check.
func New(ctx context.Context, protocol Protocol, mode Mode) (Interface, error) {
	l := legacyNew(protocol)
	if err := l.Present(); err != nil {
		return nil, err
	}
	return &withContext{l}, nil
}

// NewBestEffort returns the Interface of each family whose iptables is present.
func NewBestEffort(ctx context.Context, mode Mode) map[Protocol]Interface {
	out := map[Protocol]Interface{}
	for _, p := range []Protocol{ProtocolIPv4, ProtocolIPv6} {
		if i, err := New(ctx, p, mode); err == nil {
			out[p] = i
		}
	}
	return out
}

func (w *withContext) EnsureChain(_ context.Context, table Table, chain Chain) (bool, error) {
	return w.l.EnsureChain(table, chain)
}

func (w *withContext) FlushChain(_ context.Context, table Table, chain Chain) error {
	return w.l.FlushChain(table, chain)
}

func (w *withContext) DeleteChain(_ context.Context, table Table, chain Chain) error {
	return w.l.DeleteChain(table, chain)
}

func (w *withContext) ChainExists(_ context.Context, table Table, chain Chain) (bool, error) {
	return w.l.ChainExists(table, chain)
}

func (w *withContext) EnsureRule(_ context.Context, position RulePosition, table Table, chain Chain, args ...string) (bool, error) {
	return w.l.EnsureRule(position, table, chain, args...)
}

func (w *withContext) DeleteRule(_ context.Context, table Table, chain Chain, args ...string) error {
	return w.l.DeleteRule(table, chain, args...)
}

func (w *withContext) IsIPv6() bool { return w.l.IsIPv6() }

func (w *withContext) Protocol() Protocol { return w.l.Protocol() }

func (w *withContext) SaveInto(_ context.Context, table Table, buffer *bytes.Buffer) error {
	return w.l.SaveInto(table, buffer)
}

func (w *withContext) Restore(_ context.Context, data []byte) error {
	return w.l.RestoreAll(data, NoFlushTables, RestoreCounters)
}

func (w *withContext) Monitor(ctx context.Context, canary Chain, tables []Table, reloadFunc func(), interval time.Duration) {
	w.l.Monitor(canary, tables, reloadFunc, interval, ctx.Done())
}
