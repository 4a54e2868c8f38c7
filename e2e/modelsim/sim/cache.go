package sim

import (
	"container/list"
	"encoding/binary"
	"hash/maphash"
)

// blockHash identifies a full block of tokens together with everything before
// it: each block's hash chains the previous block's hash, as vLLM's prefix
// cache does, so a block can only hit when the whole prefix up to it matches.
type blockHash uint64

// prefixCache is an LRU set of block hashes with a capacity in blocks. It is
// not safe for concurrent use; Server guards it.
//
// Only prompt blocks are inserted, never the generated output: the next turn
// of a conversation re-sends the output as an assistant message, and its
// blocks are cached from that turn on. (vLLM would also cache output blocks;
// leaving them out keeps the simulation simple and the hit counts obvious.)
type prefixCache struct {
	seed     maphash.Seed
	capacity int
	lru      *list.List // of blockHash; front = most recently used
	index    map[blockHash]*list.Element
}

func newPrefixCache(capacity int) *prefixCache {
	return &prefixCache{
		seed:     maphash.MakeSeed(),
		capacity: capacity,
		lru:      list.New(),
		index:    make(map[blockHash]*list.Element),
	}
}

// hashes returns the chained hashes of the full blocks of tokens; a partial
// last block has none (it cannot be shared, as in vLLM).
func (c *prefixCache) hashes(tokens []string, blockTokens int) []blockHash {
	n := len(tokens) / blockTokens
	out := make([]blockHash, n)
	var h maphash.Hash
	h.SetSeed(c.seed)
	var prev blockHash
	var buf [binary.MaxVarintLen64]byte
	for i := range n {
		h.Reset()
		h.Write(binary.LittleEndian.AppendUint64(buf[:0], uint64(prev)))
		for _, t := range tokens[i*blockTokens : (i+1)*blockTokens] {
			// Length-prefixed, so that token boundaries are part of the hash.
			h.Write(binary.AppendUvarint(buf[:0], uint64(len(t))))
			h.WriteString(t)
		}
		prev = blockHash(h.Sum64())
		out[i] = prev
	}
	return out
}

// match counts the leading blocks present in the cache, at most limit.
func (c *prefixCache) match(hs []blockHash, limit int) int {
	n := 0
	for _, h := range hs[:min(len(hs), limit)] {
		if _, ok := c.index[h]; !ok {
			break
		}
		n++
	}
	return n
}

// insert adds or touches the blocks. They are touched last block first, so
// that a prefix's first block is the most recently used: eviction then takes
// the tails of sequences before their heads (as vLLM frees blocks in reverse
// order), since a head evicted makes every block after it useless.
func (c *prefixCache) insert(hs []blockHash) {
	for i := len(hs) - 1; i >= 0; i-- {
		if e, ok := c.index[hs[i]]; ok {
			c.lru.MoveToFront(e)
			continue
		}
		c.index[hs[i]] = c.lru.PushFront(hs[i])
	}
	for c.lru.Len() > c.capacity {
		e := c.lru.Back()
		delete(c.index, e.Value.(blockHash))
		c.lru.Remove(e)
	}
}

func (c *prefixCache) len() int { return c.lru.Len() }
