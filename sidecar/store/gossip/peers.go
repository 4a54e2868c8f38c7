package gossip

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/tetherproxy/tether/sidecar/config"
)

// Peers: where the addresses to join come from, and the loop that keeps
// joining them. memberlist only needs one live member to learn the rest;
// the loop joins every discovered address that is not a live member, right
// away and then every RejoinInterval, so a replica that started alone (the
// first one, or before DNS had its record) finds the ring, and a partition
// heals without waiting for memberlist's gossip to the dead to succeed.

// peerSource yields candidate addresses (host:port) to join.
type peerSource interface {
	addrs(ctx context.Context) []string
	// changed is signalled when the candidates may have changed (nil:
	// only the periodic rejoin looks).
	changed() <-chan struct{}
	stop()
}

func (s *Store) newPeerSource(ctx context.Context, cfg *config.GossipStore, port int) (peerSource, error) {
	switch cfg.Discovery {
	case config.PeersStatic:
		return staticPeers{list: cfg.Join, port: port}, nil
	case config.PeersDNS:
		if cfg.DNSName == "" {
			return nil, errors.New("store.gossip.dnsName: required when discovery is dns")
		}
		return staticPeers{list: []string{cfg.DNSName}, port: port}, nil
	case config.PeersKubernetes:
		return newKubePeers(ctx, s.opts.KubeClient, s.opts.Namespace, cfg.PeerSelector, port, s.log)
	default:
		return nil, fmt.Errorf("store.gossip.discovery: unknown %q", cfg.Discovery)
	}
}

// staticPeers is a fixed list of host[:port] (discovery static), or one
// DNS name (discovery dns, e.g. a headless Service) whose A/AAAA records
// are resolved again on every rejoin, so pods that come and go are found.
type staticPeers struct {
	list []string
	port int
}

func (p staticPeers) addrs(ctx context.Context) []string {
	var out []string
	for _, a := range p.list {
		out = append(out, resolve(ctx, a, p.port)...)
	}
	return out
}

func (p staticPeers) changed() <-chan struct{} { return nil }
func (p staticPeers) stop()                    {}

// resolve turns host[:port] into ip:port strings, comparable with
// memberlist's member addresses. A port-less entry takes our own port.
func resolve(ctx context.Context, hostport string, port int) []string {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		host, p = hostport, strconv.Itoa(port)
	}
	if ip := net.ParseIP(host); ip != nil {
		return []string{net.JoinHostPort(ip.String(), p)}
	}
	ips, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, net.JoinHostPort(ip, p))
	}
	return out
}

// rejoinLoop joins discovered addresses that are not live members.
func (s *Store) rejoinLoop() {
	tick := time.NewTicker(s.opts.RejoinInterval)
	defer tick.Stop()
	var lastWarn time.Time
	for {
		if err := s.rejoin(); err != nil && time.Since(lastWarn) > time.Minute {
			lastWarn = time.Now()
			s.log.Warn("gossip: cannot join peers (retrying); check the peers' gossip port, and that every replica has the same secretKeyFile", "err", err)
		}
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		case <-s.src.changed():
		}
	}
}

func (s *Store) rejoin() error {
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	have := map[string]bool{s.selfAddr: true}
	for _, n := range s.peers() {
		have[n.Address()] = true
	}
	var missing []string
	for _, a := range s.src.addrs(ctx) {
		if !have[a] {
			have[a] = true
			missing = append(missing, a)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	n, err := s.ml.Load().Join(missing)
	if n > 0 {
		s.met.joins.WithLabelValues("ok").Inc()
		s.log.Debug("gossip: joined", "contacted", n, "of", len(missing))
	}
	if n == 0 && err != nil {
		s.met.joins.WithLabelValues("error").Inc()
		return err
	}
	return nil
}
