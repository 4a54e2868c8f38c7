// Package netcut is a network between the members of a memberlist ring
// on one host that a test can cut into groups and heal, without
// privileges: each member binds its own address but advertises a relay's,
// so every packet and stream to a member passes its relay, and the relay
// drops what crosses the cut. A UDP packet names its sender by its source
// port (memberlist sends from its bound socket); a TCP stream's sender is
// the process that owns the connecting socket, found in /proc (loopback
// connections are both ends on this host). Streams that cross a cut are
// closed when it is made; new ones are refused while it lasts.
//
// It stands in for network namespaces with veth pairs, which need
// privileges a CI sandbox may not grant, and it cuts the real processes'
// real sockets: memberlist, its probes, its push/pull and tether's direct
// sends see exactly what a partition shows them.
package netcut

import (
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit/freeport"
)

// Net is the relays of a ring's members.
type Net struct {
	members []*Member
	// pid returns the process of member i now (it changes on a restart),
	// 0 when it is not running.
	pid func(i int) int

	mu    sync.Mutex
	group []int // group of each member while cut; nil while whole
}

// Member is one member's pair of addresses and its relay.
type Member struct {
	// Bind is where the member listens (memberlist's bind address).
	Bind string
	// Advertise is its relay, the address the member advertises and
	// the others join.
	Advertise string

	n     *Net
	index int
	tcp   net.Listener
	udp   *net.UDPConn

	mu      sync.Mutex
	streams map[net.Conn]int // open relayed streams, by sending member
	nat     map[int]*net.UDPConn
	closed  bool
	wg      sync.WaitGroup
}

// New starts the relays of n members on loopback ports; pid(i) is
// member i's process.
func New(n int, pid func(i int) int) (*Net, error) {
	nt := &Net{pid: pid}
	for i := range n {
		m, err := nt.listen(i)
		if err != nil {
			nt.Close()
			return nil, err
		}
		nt.members = append(nt.members, m)
	}
	for _, m := range nt.members { // once the members are known
		m.wg.Add(2)
		go m.acceptStreams()
		go m.relayPackets()
	}
	return nt, nil
}

// Members are the members, by index.
func (n *Net) Members() []*Member { return n.members }

// Advertised are every member's relay addresses (the ring's join list).
func (n *Net) Advertised() []string {
	out := make([]string, len(n.members))
	for i, m := range n.members {
		out[i] = m.Advertise
	}
	return out
}

func (n *Net) listen(i int) (*Member, error) {
	bind, err := freePort()
	if err != nil {
		return nil, err
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := tcp.Addr().(*net.TCPAddr).Port
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		tcp.Close()
		return nil, fmt.Errorf("relay UDP port %d: %w", port, err)
	}
	return &Member{Bind: bind, Advertise: tcp.Addr().String(), n: n, index: i, tcp: tcp, udp: udp,
		streams: map[net.Conn]int{}, nat: map[int]*net.UDPConn{}}, nil
}

// freePort returns a loopback address whose TCP and UDP ports are free
// now (memberlist binds both), below the kernel's ephemeral range
// (freeport.Pick). The port is released before the replica binds it, and
// again when the replica is killed and restarted in place: a port from
// the ephemeral range could meanwhile become the local port of an
// outgoing connection (a chaos run once failed on "address already in
// use" that way).
func freePort() (string, error) { return freeport.Addr("127.0.0.1") }

// Cut splits the ring into groups of member indexes (members in no group
// are alone) and closes the streams that cross the cut.
func (n *Net) Cut(groups ...[]int) {
	g := make([]int, len(n.members))
	for i := range g {
		g[i] = -1 - i
	}
	for gi, members := range groups {
		for _, i := range members {
			g[i] = gi
		}
	}
	n.mu.Lock()
	n.group = g
	n.mu.Unlock()
	for _, m := range n.members {
		m.mu.Lock()
		for c, from := range m.streams {
			if n.blocked(from, m.index) {
				c.Close()
			}
		}
		m.mu.Unlock()
	}
}

// Heal joins the groups again.
func (n *Net) Heal() {
	n.mu.Lock()
	n.group = nil
	n.mu.Unlock()
}

// blocked reports whether traffic from member from (-1: unknown) to
// member to crosses the cut.
func (n *Net) blocked(from, to int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.group == nil {
		return false
	}
	return from < 0 || n.group[from] != n.group[to]
}

// Close stops every relay.
func (n *Net) Close() {
	for _, m := range n.members {
		m.close()
	}
}

func (m *Member) close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	m.tcp.Close()
	m.udp.Close()
	for c := range m.streams {
		c.Close()
	}
	for _, u := range m.nat {
		u.Close()
	}
	m.mu.Unlock()
	m.wg.Wait()
}

// acceptStreams relays each TCP stream to the member unless its sender
// is across the cut.
func (m *Member) acceptStreams() {
	defer m.wg.Done()
	for {
		c, err := m.tcp.Accept()
		if err != nil {
			return
		}
		from := m.n.sender(c)
		if m.n.blocked(from, m.index) {
			c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", m.Bind, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		if !m.track(from, c, up) {
			return
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			pipe(c, up)
			m.mu.Lock()
			delete(m.streams, c)
			delete(m.streams, up)
			m.mu.Unlock()
		}()
	}
}

// track registers a relayed stream's two connections; false once closed.
func (m *Member) track(from int, c, up net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		c.Close()
		up.Close()
		return false
	}
	m.streams[c], m.streams[up] = from, from
	return true
}

// pipe copies both ways until either side ends, then closes both.
func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	a.Close()
	b.Close()
	<-done
}

// sender is the member whose process owns the other end of c, or -1.
func (n *Net) sender(c net.Conn) int {
	pids := make([]int, len(n.members))
	for i := range pids {
		pids[i] = n.pid(i)
	}
	pid, err := PeerPID(c.RemoteAddr().(*net.TCPAddr), c.LocalAddr().(*net.TCPAddr), pids)
	if err != nil {
		return -1
	}
	for i, p := range pids {
		if p == pid {
			return i
		}
	}
	return -1
}

// relayPackets relays each UDP packet to the member through a socket
// kept per sender, whose replies go back to the sender's bound port,
// unless the sender is across the cut.
func (m *Member) relayPackets() {
	defer m.wg.Done()
	target, err := net.ResolveUDPAddr("udp", m.Bind)
	if err != nil {
		return
	}
	buf := make([]byte, 64<<10)
	for {
		k, src, err := m.udp.ReadFromUDP(buf)
		if err != nil {
			return
		}
		from := m.n.memberAt(src.Port)
		if from < 0 || m.n.blocked(from, m.index) {
			continue
		}
		out, err := m.natFor(from, src)
		if err != nil {
			continue
		}
		out.WriteToUDP(buf[:k], target)
	}
}

// memberAt is the member bound to UDP port port, or -1.
func (n *Net) memberAt(port int) int {
	for i, m := range n.members {
		if _, p, _ := net.SplitHostPort(m.Bind); p == fmt.Sprint(port) {
			return i
		}
	}
	return -1
}

// natFor returns the socket that carries member from's packets to this
// member, starting the loop that carries the replies back to src.
func (m *Member) natFor(from int, src *net.UDPAddr) (*net.UDPConn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if u := m.nat[from]; u != nil {
		return u, nil
	}
	if m.closed {
		return nil, net.ErrClosed
	}
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	m.nat[from] = u
	back := *src
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			k, _, err := u.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if !m.n.blocked(m.index, from) {
				m.udp.WriteToUDP(buf[:k], &back)
			}
		}
	}()
	return u, nil
}
