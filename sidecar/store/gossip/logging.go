package gossip

import (
	"bytes"
	"log"
	"log/slog"
)

// memberlistLogger routes memberlist's own log lines ("[WARN] memberlist:
// ...") into slog at debug level: they are chatty about routine probe
// misses. What an operator must see (peers unreachable, keys rejected)
// the store logs itself at warn.
func memberlistLogger(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{l}, "", 0)
}

type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	msg := bytes.TrimSpace(p)
	level := ""
	if len(msg) > 0 && msg[0] == '[' {
		if i := bytes.IndexByte(msg, ']'); i > 0 {
			level = string(msg[1:i])
			msg = bytes.TrimSpace(msg[i+1:])
		}
	}
	msg = bytes.TrimPrefix(msg, []byte("memberlist: "))
	w.l.Debug(string(msg), "component", "memberlist", "memberlist_level", level)
	return len(p), nil
}
