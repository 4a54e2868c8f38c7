package procs

import (
	"fmt"
	"net"
	"net/http"
	"time"
)

// WaitHTTP polls url until it answers 200, the process exits, or timeout.
func (p *Process) WaitHTTP(url string, timeout time.Duration) error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if err := p.Exited(); err != nil {
			return err
		}
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %v (%s: %v); last output:\n%s", p.Name, timeout, url, last, p.Tail(20))
}

// WaitTCP polls addr until it accepts a connection, the process exits, or timeout.
func (p *Process) WaitTCP(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if err := p.Exited(); err != nil {
			return err
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s not listening on %s after %v (%v); last output:\n%s", p.Name, addr, timeout, last, p.Tail(20))
}
