// Package gossip is the store that router replicas share over a
// hashicorp/memberlist ring, without Redis.
//
// Every replica holds every binding in a bounded local table (maxEntries;
// when full, a CLOCK approximation of least recent local use picks the
// binding to evict, sparing sessions this replica served; see state.go).
// Reads never leave the process. Changes travel as deltas; memberlist
// provides membership, failure detection, the transport and encryption.
// Every record from the ring is held to this replica's own limits
// (trust.go): generations are bounded, backends must be ones its pools
// list, and expiries are clamped to the pool's TTL.
//
// # Conflict rule
//
// A binding value is (Gen, Created, Pod, PrefillPod, tombstone, expiry).
// Of two values for one session, on every replica and in any order:
//
//  1. the higher generation wins: a rebind (compare-and-delete of gen g,
//     then create with gen g+1) supersedes the old binding everywhere;
//  2. at equal generation, the earlier Created wins (of two concurrent
//     creations the first one, by the creators' clocks in ms);
//  3. then the smaller Pod, then the smaller PrefillPod (same-ms ties);
//  4. a tombstone beats the very binding it deletes, so late gossip of a
//     deleted binding cannot resurrect it;
//  5. values of the same identity keep the later expiry: refreshes only
//     extend.
//
// The rule is a total order plus a max, so merging is commutative,
// associative and idempotent: replicas that have seen the same values hold
// the same binding. It is one function, merge (merge.go), which the
// property tests exercise and every remote value goes through
// (state.apply). A value whose expiry has passed on a replica's own
// clock is absent there. A Create over a tombstone of generation g takes
// generation g+1, so a new binding after a delete supersedes it.
//
// Create is create-if-absent on the local replica and eventually across
// the ring: two replicas that create a binding for one new session within
// the time a delta takes to cross (well under a millisecond on a LAN) both
// return their own, so a turn or two may go to different backends; as soon
// as each has the other's delta, both hold the earlier one. A replica that
// receives a value that loses to its own sends its winner back (read
// repair), so a conflict heals at first contact even if a packet was lost.
//
// # Timing
//
// A created, rebound or deleted binding is sent directly to every member at
// once (a UDP packet each, batching what is waiting), not on memberlist's
// 200 ms gossip tick; it is also queued on memberlist's gossip (bounded to
// 1,024 messages, newest kept) as the repair path. Lookups slide the expiry
// locally; a binding's new expiry is announced at most once per quarter TTL,
// batched every RefreshInterval (250 ms), so refresh traffic grows with the
// number of active sessions, never with the request rate. Other replicas
// may therefore let a binding lapse up to a quarter TTL before the replica
// that served it last. TTLs travel as time left, so clock skew between
// replicas does not change them; each replica sweeps expired bindings on
// its own clock every SweepInterval (1 s).
//
// # Bounds
//
// Gossip packets are at most memberlist's UDPBufferSize (1,400 bytes) and
// carry ~20 bindings. Push/pull carries no bindings. A replica that joins
// (or each side of a healed partition) pulls the state from one synced
// member, in chunks of at most ChunkBytes (128 KiB) over TCP, at most
// ChunkRate (64) chunks per second per stream, two streams at a time per
// responder: about 8 MiB/s, 1,000,000 bindings in about 12 s
// (BenchmarkStateTransfer; each chunk is a TCP connection of its own,
// memberlist's SendReliable, so larger chunks cost both sides less CPU
// than more of them). Replicas that meet before either has pulled hand
// each other their (small) state, and a replica synced by its startup
// grace alone pulls once when a member it met unsynced turns synced
// (transfer.go). Tombstones live twice the deleted binding's remaining TTL
// plus TombstoneGrace (30 s).
//
// # Encryption
//
// secretKeyFile (a 16, 24 or 32-byte key, base64 or raw) is required unless
// the config says insecure: true. Every packet and stream is AES-GCM
// encrypted and authenticated with memberlist's keyring, and unencrypted
// or wrongly keyed traffic is refused both ways (GossipVerifyIncoming and
// GossipVerifyOutgoing): a replica without the key cannot join, read or
// write a binding. During a rotation the file holds several base64 keys,
// one per line: the first encrypts, all decrypt, so replicas restarted one
// at a time keep talking (add the new key second, then make it first, then
// drop the old one). An insecure ring is plaintext (session hashes and
// backend names, never a session key) and anyone who reaches the port can
// write to it; it logs a warning at every start and sets
// tether_gossip_insecure to 1.
package gossip
