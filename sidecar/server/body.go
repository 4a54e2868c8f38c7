package server

import (
	"fmt"
	"time"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/reqbody"
	"github.com/tetherproxy/tether/sidecar/responses"
)

// bodyFields are the JSON body fields a listener's requests are read for,
// all in one scan, run when a first field is read: "model" when it serves
// several pools, the Responses API's fields (routing by
// previous_response_id is on for every pool), "stream" (a pool whose
// cost policy, set in the config or at run time, times streams reads it
// in that one scan instead of a scan of its own), and its pools' Body
// sources.
func bodyFields(cfg *config.Config, l config.Listener) (*reqbody.Fields, error) {
	paths := append(append([]string(nil), responses.BodyFields...), "stream")
	if len(l.Pools) > 1 {
		paths = append(paths, "model")
	}
	for _, i := range l.Pools {
		// A non-sticky pool has no sources; a ModelServer pool's come
		// from the object at run time, and reqbody reads their paths by a
		// scan of their own.
		ss := cfg.Pools[i].SessionSticky
		if ss == nil {
			continue
		}
		for _, s := range ss.Sources {
			if s.Type == config.SourceBody {
				paths = append(paths, s.Name)
			}
		}
	}
	f, err := reqbody.NewFields(paths...)
	if err != nil {
		return nil, fmt.Errorf("listener %s: %w", l.Addr, err)
	}
	return f, nil
}

// responseGrace is how long a replica of a gossip ring waits for the
// binding of a response id it does not know yet: a peer bound it before
// the client could read the id, and a direct send reaches every member
// within milliseconds, but an agent may send the next turn sooner.
const responseGrace = 150 * time.Millisecond
