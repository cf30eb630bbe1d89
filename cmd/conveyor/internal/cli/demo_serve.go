package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"

	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/pipeline"
)

// demoServer is the HTTP API and dashboard that demo --serve runs beside the demo, on the
// demo's own Redis (embedded or not).
type demoServer struct {
	hs     *http.Server
	srv    *api.Server
	url    string
	served chan error
	once   sync.Once
	err    error
}

// checkDemoServe validates demo --serve's address with serve's rules: a non-loopback address
// needs $CONVEYOR_API_TOKEN (demo has no --insecure: it is for trying things on a laptop).
func checkDemoServe(addr string, getenv func(string) string) (token string, err error) {
	sf := serveFlags{addr: addr, addrGiven: true, maxWait: api.DefaultMaxWait}
	token, _, err = sf.check(func(k string) string {
		if k == envAPIAddr { // --serve is the address; $CONVEYOR_API_ADDR is serve's
			return ""
		}
		return getenv(k)
	})
	if err != nil {
		return "", usageErrorf("demo --serve %s: %v", addr, err)
	}
	return token, nil
}

// startDemoServer listens on addr and serves the API over the demo's client. It returns once
// the listener is open, so the URL it prints answers.
func startDemoServer(addr, token string, client *pipeline.Client, log zerolog.Logger) (*demoServer, error) {
	insp, err := pipeline.NewInspector(client.Redis(), pipeline.InspectorConfig{Prefix: client.Prefix()})
	if err != nil {
		return nil, err
	}
	srv, err := api.New(client, insp, api.Config{AuthToken: token, Logger: log, Dashboard: api.Dashboard()})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("demo --serve: listen on %s: %w; is another server using the port?", addr, stripNetPrefix(err))
	}
	d := &demoServer{hs: newHTTPServer(srv, api.DefaultMaxWait, log), srv: srv,
		url: "http://" + ln.Addr().String() + "/", served: make(chan error, 1)}
	d.hs.RegisterOnShutdown(func() { _ = srv.Close() })
	go func() { d.served <- d.hs.Serve(ln) }()
	return d, nil
}

// stop shuts the server down, once: long polls answer at once, other requests get serve's
// grace.
func (d *demoServer) stop() error {
	d.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), serveShutdownTimeout)
		defer cancel()
		if err := d.hs.Shutdown(ctx); err != nil {
			_ = d.hs.Close()
		}
		if err := <-d.served; !errors.Is(err, http.ErrServerClosed) {
			d.err = fmt.Errorf("demo --serve on %s: %w", d.url, err)
		}
	})
	return d.err
}
