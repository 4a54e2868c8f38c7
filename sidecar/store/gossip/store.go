package gossip

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/store"
)

// Options carries what the config file does not: where metrics and logs
// go, the process's identity, the Kubernetes client, and tuning knobs with
// production defaults (zero means default).
type Options struct {
	// Reg receives the store's metrics; nil: unregistered.
	Reg prometheus.Registerer
	// Log receives the store's logs; nil: discarded.
	Log *slog.Logger
	// KubeClient is required for discovery: kubernetes.
	KubeClient kubernetes.Interface
	// Namespace of the router pods (the sidecar's own); required for
	// discovery: kubernetes.
	Namespace string
	// NodeName prefixes this replica's memberlist name (a random suffix
	// keeps a restarted pod from clashing with its own ghost): the pod's
	// name.
	NodeName string
	// PodIP is advertised to the ring when cfg.Advertise is unset (the
	// injector renders $(POD_IP) there); empty: memberlist picks.
	PodIP string
	// Clock is the time source for TTLs; default time.Now.
	Clock func() time.Time
	// Limits are this replica's pools, against which every record from
	// the ring is judged (trust.go); nil: only the wire's own bounds.
	Limits Limits

	// RefreshInterval is how often coalesced refreshes are sent; 250ms.
	RefreshInterval time.Duration
	// SweepInterval is how often expired entries are dropped; 1s.
	SweepInterval time.Duration
	// RejoinInterval is how often peers from discovery that are not
	// members are joined (partition healing, late peers); 10s.
	RejoinInterval time.Duration
	// TombstoneGrace is added to a tombstone's lifetime; 30s.
	TombstoneGrace time.Duration
	// ChunkBytes bounds one state-transfer message; 128 KiB (doc.go,
	// Bounds).
	ChunkBytes int
	// ChunkRate bounds state-transfer messages per second per stream; 64.
	ChunkRate int
	// TransferTimeout is how long a pull may go without a chunk before
	// it is retried with another peer; 10s.
	TransferTimeout time.Duration
	// LeaveTimeout bounds the graceful leave in Close; 3s.
	LeaveTimeout time.Duration
	// WorkInterval is how often each replica reports its recent work
	// per backend to the ring (work.go); 1s. WorkGrace is how long after
	// an epoch its reports count in the view; 250ms.
	WorkInterval, WorkGrace time.Duration
	// StartupGrace is how long a replica that has met no synced member
	// waits before it declares itself synced (transfer.go); 1s.
	StartupGrace time.Duration
	// Memberlist, if set, adjusts memberlist's config before it starts
	// (tests shorten its timers).
	Memberlist func(*memberlist.Config)
	// WrapTransport, if set, wraps the network transport (tests partition
	// the network and count bytes with it).
	WrapTransport func(memberlist.NodeAwareTransport) memberlist.NodeAwareTransport
}

func (o *Options) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.RefreshInterval, 250*time.Millisecond)
	def(&o.SweepInterval, time.Second)
	def(&o.RejoinInterval, 10*time.Second)
	def(&o.TombstoneGrace, 30*time.Second)
	def(&o.TransferTimeout, 10*time.Second)
	def(&o.LeaveTimeout, 3*time.Second)
	def(&o.StartupGrace, time.Second)
	def(&o.WorkInterval, DefaultWorkInterval)
	def(&o.WorkGrace, DefaultWorkGrace)
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = 128 << 10
	}
	o.ChunkBytes = max(o.ChunkBytes, 2*recordMax)
	if o.ChunkRate <= 0 {
		o.ChunkRate = 64
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

// maxQueued bounds memberlist's gossip queue of deltas (the repair path):
// past it the oldest are pruned; the direct sends already reached everyone.
const maxQueued = 1024

// Store is the gossip store. See the package documentation.
type Store struct {
	opts  Options
	log   *slog.Logger
	name  string
	st    *state
	met   *metrics
	ml    atomic.Pointer[memberlist.Memberlist]
	queue *memberlist.TransmitLimitedQueue
	xfer  *transfer
	src   peerSource
	// selfAddr is this replica's advertised ip:port.
	selfAddr string

	// others are the other live members, copied in memberlist's event
	// callbacks: the *Node values Members() returns are mutated by
	// memberlist under its own lock, so they are not read outside it.
	othersMu sync.RWMutex
	others   map[string]memberlist.Node
	// heard is when each of them was last heard from (Unix nanoseconds):
	// a message from it, or an ack of memberlist's probe.
	heard map[string]*atomic.Int64

	packetLimit int
	out         chan pair       // deltas waiting for their direct send
	repairs     chan repairSend // read-repair replies

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	// The ring's recent work per backend (work.go): this replica's
	// sources, and every member's last reports, this one's included.
	workMu      sync.Mutex
	workSources []WorkSource
	workReports map[string][]workReport

	// hook, when set (tests, benchmarks), sees every remote value merged.
	hook atomic.Pointer[func(key, applyResult)]
}

type repairSend struct {
	to   string
	recs []record
}

var _ store.Store = (*Store)(nil)
var _ store.Counter = (*Store)(nil)

// New starts a replica: it binds cfg.Bind, starts memberlist and begins
// joining peers from discovery in the background (a first replica has
// none; a failed join is retried every RejoinInterval). ctx bounds only
// the start; Close stops the store.
func New(ctx context.Context, cfg *config.GossipStore, opts Options) (*Store, error) {
	if cfg == nil {
		return nil, errors.New("gossip store: no store.gossip config")
	}
	opts.setDefaults()
	log := opts.Log.With("store", "gossip")
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	s := &Store{
		opts:        opts,
		log:         log,
		name:        opts.NodeName + "-" + hex.EncodeToString(suffix),
		st:          newState(cfg.MaxEntries, opts.Clock().UnixMilli()),
		out:         make(chan pair, 4096),
		others:      map[string]memberlist.Node{},
		heard:       map[string]*atomic.Int64{},
		repairs:     make(chan repairSend, 256),
		workReports: map[string][]workReport{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.met = newMetrics(opts.Reg, cfg.SecretKeyFile == "",
		func() float64 { return float64(s.Members()) },
		func() float64 { return float64(s.Len()) },
		func() float64 { return float64(s.st.evicted.Load()) },
		s.workView)
	s.queue = &memberlist.TransmitLimitedQueue{NumNodes: s.Members, RetransmitMult: 3}
	s.xfer = newTransfer(s)

	mc, err := s.memberlistConfig(cfg)
	if err != nil {
		s.cancel()
		return nil, err
	}
	s.packetLimit = mc.UDPBufferSize - 150 // userMsg, CRC, encryption, label headroom
	s.xfer.minAbsence = max(4*mc.GossipInterval, mc.ProbeInterval)
	if s.src, err = s.newPeerSource(ctx, cfg, mc.AdvertisePort); err != nil {
		s.cancel()
		_ = mc.Transport.Shutdown()
		return nil, err
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		s.cancel()
		s.src.stop()
		_ = mc.Transport.Shutdown()
		return nil, fmt.Errorf("gossip store: start memberlist: %w", err)
	}
	s.ml.Store(ml)
	s.selfAddr = ml.LocalNode().Address()
	s.xfer.self.Store(&s.selfAddr)
	log.Info("gossip store started", "member", s.name, "addr", s.selfAddr,
		"discovery", cfg.Discovery, "encrypted", mc.EncryptionEnabled())
	if !mc.EncryptionEnabled() {
		log.Warn("gossip is neither encrypted nor authenticated (store.gossip.insecure: true): " +
			"anyone who can reach the gossip port can read and rewrite session bindings; set store.gossip.secretKeyFile")
	}

	s.start(s.sendLoop, s.sweepLoop, s.xfer.loop, s.xfer.serve, s.xfer.serve, s.rejoinLoop, s.workLoop)
	return s, nil
}

func (s *Store) start(fns ...func()) {
	for _, f := range fns {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			f()
		}()
	}
}

func (s *Store) memberlistConfig(cfg *config.GossipStore) (*memberlist.Config, error) {
	host, portStr, err := net.SplitHostPort(cfg.Bind)
	if err != nil {
		return nil, fmt.Errorf("store.gossip.bind %q: %w", cfg.Bind, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("store.gossip.bind %q: bad port", cfg.Bind)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = s.name
	mc.Logger = memberlistLogger(s.log)
	mc.Delegate = delegate{s}
	mc.Events = delegate{s}
	mc.Ping = delegate{s}
	mc.DelegateProtocolVersion, mc.DelegateProtocolMin, mc.DelegateProtocolMax = wireVersion, wireVersion, wireVersion
	switch {
	case cfg.SecretKeyFile != "":
		keys, err := loadKeys(cfg.SecretKeyFile)
		if err != nil {
			return nil, err
		}
		if mc.Keyring, err = memberlist.NewKeyring(keys, keys[0]); err != nil {
			return nil, fmt.Errorf("store.gossip.secretKeyFile: %w", err)
		}
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	case !cfg.Insecure:
		return nil, errors.New("store.gossip.secretKeyFile: required (or store.gossip.insecure: true)")
	}
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{host}, BindPort: port, Logger: mc.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("store.gossip.bind %q: %w", cfg.Bind, err)
	}
	mc.BindAddr, mc.BindPort = host, nt.GetAutoBindPort()
	mc.AdvertisePort = mc.BindPort
	adv := cfg.Advertise
	if adv == "" {
		adv = s.opts.PodIP
	}
	if adv != "" {
		if h, p, err := net.SplitHostPort(adv); err == nil {
			adv = h
			if mc.AdvertisePort, err = strconv.Atoi(p); err != nil {
				_ = nt.Shutdown()
				return nil, fmt.Errorf("store.gossip.advertise %q: bad port", cfg.Advertise)
			}
		}
		mc.AdvertiseAddr = adv
	}
	var tr memberlist.NodeAwareTransport = nt
	if s.opts.WrapTransport != nil {
		tr = s.opts.WrapTransport(nt)
	}
	mc.Transport = tr
	if s.opts.Memberlist != nil {
		s.opts.Memberlist(mc)
	}
	return mc, nil
}

// Lookup returns key's live binding and slides its expiry to now+ttl. The
// refresh is local; the ring hears of it in a coalesced refresh once the
// expiry it knows is a quarter TTL behind.
func (s *Store) Lookup(_ context.Context, k string, ttl time.Duration) (store.Binding, bool, error) {
	v, ok := s.st.lookup(keyOf(k), s.now(), ttlMs(ttl), true)
	if !ok {
		return store.Binding{}, false, nil
	}
	return binding(v), true, nil
}

// Peek returns key's live binding without refreshing it.
func (s *Store) Peek(_ context.Context, k string) (store.Binding, bool, error) {
	v, ok := s.st.lookup(keyOf(k), s.now(), 0, false)
	if !ok {
		return store.Binding{}, false, nil
	}
	return binding(v), true, nil
}

// Create commits b unless this replica holds a live binding for key, and
// returns the binding that holds here afterwards. Across replicas it is
// create-if-absent only eventually: two replicas that create within the
// time a delta takes to cross both return their own binding, then the
// merge rule makes every replica settle on the same one within that time.
func (s *Store) Create(_ context.Context, k string, b store.Binding, ttl time.Duration) (store.Binding, error) {
	if b.Pod == "" {
		return store.Binding{}, errors.New("gossip store: binding without pod")
	}
	if len(b.Pod) > maxIDLen || len(b.PrefillPod) > maxIDLen {
		return store.Binding{}, fmt.Errorf("gossip store: backend ID longer than %d bytes", maxIDLen)
	}
	now := s.now()
	created := now
	if !b.Created.IsZero() {
		created = b.Created.UnixMilli()
	}
	kk := keyOf(k)
	v, ok := s.st.create(kk, value{Gen: b.Gen, Created: created, Pod: b.Pod, Prefill: b.PrefillPod}, now, ttlMs(ttl))
	if ok {
		s.announce(pair{kk, v})
	}
	return binding(v), nil
}

// CompareAndDelete deletes key's binding while it is still old and tells
// every replica with a tombstone.
func (s *Store) CompareAndDelete(_ context.Context, k string, old store.Binding) (bool, error) {
	kk := keyOf(k)
	v, ok := s.st.compareAndDelete(kk, old.Gen, old.Pod, old.PrefillPod, s.now(), s.opts.TombstoneGrace.Milliseconds())
	if ok {
		s.announce(pair{kk, v})
	}
	return ok, nil
}

// Len counts the bindings held here (store.Counter).
func (s *Store) Len() int { return s.st.len() }

// CountBindings sets n[i] to the live bindings naming ids[i]
// (store.BindingCounter). Every replica holds every binding of the ring,
// so every replica counts nearly the same.
func (s *Store) CountBindings(ids []string, n []int) { s.st.countBindings(ids, n) }

// Members counts the live members of the ring, this replica included.
func (s *Store) Members() int {
	s.othersMu.RLock()
	defer s.othersMu.RUnlock()
	return len(s.others) + 1
}

// Synced reports whether this replica has received the ring's state (or
// found nobody to receive it from): a readiness signal.
func (s *Store) Synced() bool { return s.xfer.isSynced() }

// Close leaves the ring gracefully (peers learn at once instead of
// suspecting this replica for seconds), then stops everything. The sidecar
// calls it on SIGTERM.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		// Stop our loops first so that no rejoin races the leave.
		s.cancel()
		ml := s.ml.Load()
		if err := ml.Leave(s.opts.LeaveTimeout); err != nil {
			s.log.Debug("gossip leave", "err", err)
		}
		s.closeErr = ml.Shutdown()
		s.wg.Wait()
		s.src.stop()
		s.log.Info("gossip store left the ring", "member", s.name)
	})
	return s.closeErr
}

func (s *Store) now() int64 { return s.opts.Clock().UnixMilli() }

func ttlMs(ttl time.Duration) int64 { return min(max(ttl.Milliseconds(), 1), maxTTL) }

func binding(v value) store.Binding {
	return store.Binding{
		Pod: v.Pod, PrefillPod: v.Prefill, Gen: v.Gen,
		Created: time.UnixMilli(v.Created), ExpiresAt: time.UnixMilli(v.Expires),
	}
}

// delegate keeps memberlist's callbacks off Store's public API.
type delegate struct{ s *Store }

func (d delegate) NodeMeta(int) []byte { return d.s.xfer.meta() }
func (d delegate) NotifyMsg(b []byte)  { d.s.receive(b) }
func (d delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.s.queue.GetBroadcasts(overhead, limit)
}

// LocalState is memberlist's push/pull payload. It carries no bindings:
// a full state there would grow with the session count and travel every
// PushPullInterval. State moves in bounded chunks instead (transfer.go).
func (d delegate) LocalState(bool) []byte        { return nil }
func (d delegate) MergeRemoteState([]byte, bool) {}

// The event callbacks run under memberlist's node lock: they copy and
// return, and never call back into memberlist.
func (d delegate) NotifyJoin(n *memberlist.Node) {
	if n.Name != d.s.name {
		d.s.setMember(*n)
		d.s.xfer.joined(*n)
	}
}
func (d delegate) NotifyUpdate(n *memberlist.Node) {
	if n.Name == d.s.name {
		return
	}
	old, known := d.s.setMember(*n)
	// memberlist calls NotifyUpdate when a member's metadata changed;
	// ours changes only when a replica turns synced.
	if peerSynced(n) && (!known || !peerSynced(&old)) {
		d.s.xfer.turnedSynced(*n)
	}
}
func (d delegate) NotifyLeave(n *memberlist.Node) {
	d.s.othersMu.Lock()
	delete(d.s.others, n.Name)
	var heard time.Time
	if h := d.s.heard[n.Name]; h != nil {
		heard = time.Unix(0, h.Load())
	}
	delete(d.s.heard, n.Name)
	d.s.othersMu.Unlock()
	d.s.forgetWork(n.Name)
	d.s.xfer.left(*n, heard)
}

// NotifyPingComplete is memberlist's PingDelegate: a probe of other was
// acknowledged.
func (d delegate) NotifyPingComplete(other *memberlist.Node, _ time.Duration, _ []byte) {
	d.s.heardFrom(other.Name)
}
func (d delegate) AckPayload() []byte { return nil }

// setMember records n and returns the copy it replaces, if any.
func (s *Store) setMember(n memberlist.Node) (old memberlist.Node, known bool) {
	s.othersMu.Lock()
	defer s.othersMu.Unlock()
	old, known = s.others[n.Name]
	s.others[n.Name] = n
	if s.heard[n.Name] == nil {
		h := new(atomic.Int64)
		h.Store(time.Now().UnixNano())
		s.heard[n.Name] = h
	}
	return old, known
}

// heardFrom records that the live member name was just heard from. Names
// that are no live member (a forged or stale sender) are not remembered.
func (s *Store) heardFrom(name string) {
	s.othersMu.RLock()
	h := s.heard[name]
	s.othersMu.RUnlock()
	if h != nil {
		h.Store(time.Now().UnixNano())
	}
}

// peers returns copies of the other live members.
func (s *Store) peers() []*memberlist.Node {
	s.othersMu.RLock()
	defer s.othersMu.RUnlock()
	out := make([]*memberlist.Node, 0, len(s.others))
	for _, n := range s.others {
		out = append(out, &n)
	}
	return out
}

// member returns a copy of the member named name, or nil.
func (s *Store) member(name string) *memberlist.Node {
	s.othersMu.RLock()
	defer s.othersMu.RUnlock()
	if n, ok := s.others[name]; ok {
		return &n
	}
	return nil
}
