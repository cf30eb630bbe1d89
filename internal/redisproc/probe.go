package redisproc

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// ProbePID sends INFO server over a raw connection (TLS with t if t is not
// nil) and returns the process_id the server reports. A server that answers
// with another pid than the one started is someone else's on that port.
func ProbePID(addr string, t *tls.Config) (int, error) {
	var conn net.Conn
	var err error
	d := &net.Dialer{Timeout: 500 * time.Millisecond}
	if t != nil {
		conn, err = tls.DialWithDialer(d, "tcp", addr, t)
	} else {
		conn, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(conn, "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "$") {
		return 0, fmt.Errorf("INFO: %s", line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 {
		return 0, fmt.Errorf("INFO: bad reply %q", line)
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for l := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO: no process_id")
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago
// (never 6379, the shared Redis).
func FreePort() (int, error) {
	for range 10 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("redisproc: finding a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port != 6379 {
			return port, nil
		}
	}
	return 0, errors.New("redisproc: no free port")
}
