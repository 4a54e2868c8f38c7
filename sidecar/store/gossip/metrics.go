package gossip

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	msgsSent, bytesSent *prometheus.CounterVec // by kind
	msgsRecv, bytesRecv *prometheus.CounterVec // by kind
	decodeErrors        prometheus.Counter
	conflicts           *prometheus.CounterVec        // by result: replaced | kept
	chunks              *prometheus.CounterVec        // by direction: sent | received
	transfers           *prometheus.CounterVec        // by result: complete | retry | gave_up | catch_up | handover
	dropped             *prometheus.CounterVec        // by reason
	recordsDropped      map[string]prometheus.Counter // by reason (trust.go)
	recordsClamped      prometheus.Counter
	expired             prometheus.Counter
	joins               *prometheus.CounterVec // by result: ok | error
}

// newMetrics registers the store's metrics on reg (nil: unregistered, for
// tests that run several stores in one process). members and bindings are
// read at scrape time; insecure is a ring without a key.
func newMetrics(reg prometheus.Registerer, insecure bool, members, bindings, evicted func() float64, work func() (int, float64)) *metrics {
	const ns = "tether_gossip_"
	m := &metrics{
		msgsSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ns + "messages_sent_total", Help: "Gossip store messages sent, by kind (each copy to each member counts).",
		}, []string{"kind"}),
		bytesSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ns + "bytes_sent_total", Help: "Payload bytes of gossip store messages sent, by kind (before memberlist's encryption and compression).",
		}, []string{"kind"}),
		msgsRecv: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ns + "messages_received_total", Help: "Gossip store messages received, by kind.",
		}, []string{"kind"}),
		bytesRecv: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ns + "bytes_received_total", Help: "Payload bytes of gossip store messages received, by kind.",
		}, []string{"kind"}),
		decodeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: ns + "decode_errors_total", Help: "Messages from peers that could not be decoded and were dropped.",
		}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ns + "merge_conflicts_total", Help: "Remote bindings that differed from the local one: replaced (the remote won) or kept (the local won and was sent back).",
		}, []string{"result"}),
		chunks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ns + "state_transfer_chunks_total", Help: "State-transfer chunks, by direction.",
		}, []string{"direction"}),
		transfers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ns + "state_transfers_total", Help: "State transfers, by result: pulls this replica completed (complete), retried with another member (retry) or gave up (gave_up); catch_up: a pull started by a replica that declared itself synced by its startup grace alone while it knew members that were not synced yet; handover: this replica's state streamed unasked to a member met before this replica had pulled.",
		}, []string{"result"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ns + "dropped_total", Help: "Outgoing work dropped because a bounded queue was full, by reason (gossip repairs it).",
		}, []string{"reason"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: ns + "bindings_expired_total", Help: "Bindings dropped by the sweep after their TTL passed on this replica's clock.",
		}),
		joins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ns + "join_attempts_total", Help: "Attempts to join peers from discovery, by result.",
		}, []string{"result"}),
	}
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: ns + "records_dropped_total", Help: "Records from the ring refused by this replica's limits, by reason: generation (above the maximum), unknown_backend (no pool here lists the backend), not_synced (discovery has no first view yet), work_report (a report of recent work of an epoch out of use, or from a non-member; its backends' entries count under unknown_backend and not_synced too).",
	}, []string{"reason"})
	m.recordsDropped = map[string]prometheus.Counter{}
	for _, r := range dropReasons {
		m.recordsDropped[r] = dropped.WithLabelValues(r)
	}
	m.recordsClamped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: ns + "records_clamped_total", Help: "Records from the ring whose time left exceeded the pool's TTL and was cut to it.",
	})
	if reg == nil {
		return m
	}
	insecureGauge := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: ns + "insecure", Help: "1 when the ring runs without a key (store.gossip.insecure: true): plaintext and unauthenticated.",
	})
	if insecure {
		insecureGauge.Set(1)
	}
	reg.MustRegister(m.msgsSent, m.bytesSent, m.msgsRecv, m.bytesRecv, m.decodeErrors, insecureGauge,
		m.conflicts, m.chunks, m.transfers, m.dropped, m.expired, m.joins, dropped, m.recordsClamped,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: ns + "members", Help: "Live members of the gossip ring, this replica included.",
		}, members),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: ns + "bindings", Help: "Bindings held by this replica (tombstones excluded).",
		}, bindings),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: ns + "evictions_total", Help: "Bindings evicted because the store reached maxEntries.",
		}, evicted),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: ns + "work_reporters", Help: "Members (this replica included) whose report of recent work counts in the view the work bound reads now.",
		}, func() float64 { n, _ := work(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: ns + "work_bytes", Help: "Recent request bytes the ring's members sent to all backends, in the view the work bound reads now (halving every 30 s).",
		}, func() float64 { _, b := work(); return b }),
	)
	return m
}

func (m *metrics) sent(kind string, msgs, bytes int) {
	m.msgsSent.WithLabelValues(kind).Add(float64(msgs))
	m.bytesSent.WithLabelValues(kind).Add(float64(bytes))
}
