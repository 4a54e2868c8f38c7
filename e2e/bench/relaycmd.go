package main

import (
	"context"
	"errors"
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
	fs := flag.NewFlagSet("relay", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	backends := fs.String("backends", "", "backends host:port, comma-separated")
	_ = fs.Parse(args)
	if *backends == "" {
		return errors.New("relay: -backends is required")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Println("serving on", ln.Addr())
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	to := strings.Split(*backends, ",")
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
		wg.Go(func() { relay(ctx, c, to[n%len(to)]) })
	}
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
