package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

// relayMain serves a TCP relay until stopped: each client connection is
// pinned to one backend (taken in turn) and its bytes copied both ways,
// one goroutine per direction (splice(2) on Linux), with no HTTP at all.
// Section 1 measures it as the floor of a Go proxy on the machine: what
// the runtime's goroutines, netpoller and system calls cost per request
// before a proxy parses or decides anything.
func relayMain(ctx context.Context, args []string) error {
	return serveConns(ctx, "relay", args, nil, func(to []string) (connHandler, func()) {
		return func(ctx context.Context, c net.Conn, n int) { relay(ctx, c, to[n%len(to)]) }, func() {}
	})
}

// connHandler serves one accepted connection, the nth, until it ends.
type connHandler func(ctx context.Context, c net.Conn, n int)

// serveConns is the command line and accept loop of the bench's own
// proxies (relay, minproxy): -listen and -backends, the address printed
// once listening, every connection handled on a goroutine of its own by
// what start made of the backends, until ctx ends. It returns once every
// handler has, then calls start's stop. flags, if not nil, adds the
// command's own flags to the set before it is parsed.
func serveConns(ctx context.Context, cmd string, args []string, flags func(*flag.FlagSet), start func(backends []string) (connHandler, func())) error {
	ln, backends, err := listenFor(cmd, args, flags)
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	handle, stop := start(backends)
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for n := 0; ; n++ {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// Out of file descriptors, at an overloaded rate: wait for
			// connections to end, as the sidecar does.
			if ne, ok := err.(interface{ Temporary() bool }); ok && ne.Temporary() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		wg.Go(func() { handle(ctx, c, n) })
	}
}

// listenFor is the command line of the bench's own proxies: it parses
// -listen and -backends (and, if flags is not nil, the flags it adds),
// listens, and prints the address.
func listenFor(cmd string, args []string, flags func(*flag.FlagSet)) (net.Listener, []string, error) {
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	backends := fs.String("backends", "", "backends host:port, comma-separated")
	if flags != nil {
		flags(fs)
	}
	_ = fs.Parse(args)
	if *backends == "" {
		return nil, nil, fmt.Errorf("%s: -backends is required", cmd)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return nil, nil, err
	}
	fmt.Println("serving on", ln.Addr())
	return ln, strings.Split(*backends, ","), nil
}

// relay copies between c and a new connection to backend until either
// side closes or ctx ends.
func relay(ctx context.Context, c net.Conn, backend string) {
	defer c.Close()
	var d net.Dialer
	u, err := d.DialContext(ctx, "tcp", backend)
	if err != nil {
		return
	}
	defer u.Close()
	stop := context.AfterFunc(ctx, func() { c.Close(); u.Close() })
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(u, c)
		u.Close() // the client went: end the backend's side too
	}()
	_, _ = io.Copy(c, u)
	c.Close()
	<-done
}
