package redisstore

import (
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tetherproxy/tether/sidecar/store"
)

// Hash fields of a binding. pod and prefillPod are the names Kthena's
// Redis store uses, so operators' existing `HGETALL` habits keep working;
// a hash written by Kthena (no created, no gen) reads as generation 0.
const (
	fieldPod        = "pod"
	fieldPrefillPod = "prefillPod"
	fieldCreated    = "created" // Unix nanoseconds, decimal
	fieldGen        = "gen"     // decimal
)

// createScript commits a binding only if the key holds none, and returns
// the binding that holds afterwards: {1} when ours was written, or
// {0, pod, prefillPod, created, gen, pttl} when another replica's was
// there first. Run twice (a retry after a lost reply) it returns our own
// binding as the existing one: the same answer.
var createScript = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'pod', 'prefillPod', 'created', 'gen')
if cur[1] then
  return {0, cur[1], cur[2] or '', cur[3] or '', cur[4] or '', redis.call('PTTL', KEYS[1])}
end
redis.call('HSET', KEYS[1], 'pod', ARGV[1], 'prefillPod', ARGV[2], 'created', ARGV[3], 'gen', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return {1}
`)

// deleteScript deletes the binding only while pod, prefillPod and gen are
// still the ones the caller saw (store.Binding.SameTarget), so a replica
// acting on a stale read never removes a newer binding. A missing gen
// (a Kthena-written hash) counts as 0.
var deleteScript = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'pod', 'prefillPod', 'gen')
if cur[1] == ARGV[1] and (cur[2] or '') == ARGV[2] and (cur[3] or '0') == ARGV[3] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// bindingFields is the HMGET field list of Lookup and Peek.
var bindingFields = []string{fieldPod, fieldPrefillPod, fieldCreated, fieldGen}

// parseFields reads HMGET's reply in bindingFields order; ok is false
// when the key (or its pod field) does not exist.
func parseFields(vals []any) (b store.Binding, ok bool, err error) {
	if len(vals) != len(bindingFields) {
		return b, false, fmt.Errorf("unexpected reply of %d fields", len(vals))
	}
	pod, _ := vals[0].(string)
	if pod == "" {
		return b, false, nil
	}
	prefill, _ := vals[1].(string)
	created, _ := vals[2].(string)
	gen, _ := vals[3].(string)
	return toBinding(pod, prefill, created, gen), true, nil
}

// toBinding is lenient about created and gen: a hash written by another
// tool may lack them, and a binding without them is still a binding.
func toBinding(pod, prefill, created, gen string) store.Binding {
	b := store.Binding{Pod: pod, PrefillPod: prefill}
	if ns, err := strconv.ParseInt(created, 10, 64); err == nil && ns > 0 {
		b.Created = time.Unix(0, ns)
	}
	b.Gen, _ = strconv.ParseUint(gen, 10, 64)
	return b
}

// parseCreate reads createScript's reply.
func parseCreate(v any) (created bool, b store.Binding, pttl int64, err error) {
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return false, b, 0, fmt.Errorf("unexpected create reply %T", v)
	}
	if n, _ := arr[0].(int64); n == 1 {
		return true, b, 0, nil
	}
	if len(arr) != 6 {
		return false, b, 0, fmt.Errorf("unexpected create reply of %d elements", len(arr))
	}
	s := make([]string, 4)
	for i := range s {
		s[i], _ = arr[i+1].(string)
	}
	pttl, _ = arr[5].(int64)
	return false, toBinding(s[0], s[1], s[2], s[3]), pttl, nil
}
