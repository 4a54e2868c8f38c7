package proxy

import (
	"log/slog"
	"sync"
)

// accessLine holds an access-log line's attributes while finish builds
// it. The logger copies them into its record, so one buffer serves
// request after request: pooled, it costs an exchange nothing (in the
// exchange it was a kilobyte of each request's allocation).
type accessLine [24]slog.Attr

var accessLines = sync.Pool{New: func() any { return new(accessLine) }}
