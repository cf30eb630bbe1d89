package cli

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Flag combinations that serve refuses before it touches Redis or a port: exit 2.
func TestServeRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		msgs []string
	}{
		{"AllInterfacesWithoutToken", []string{"--addr", ":8080"},
			[]string{"every interface", "--auth-token", envAPIToken, "--insecure"}},
		{"PublicAddrWithoutToken", []string{"--addr", "0.0.0.0:8080"}, []string{"--auth-token", "--insecure"}},
		{"HostNameWithoutToken", []string{"--addr", "example.com:8080"}, []string{"--auth-token"}},
		{"NoPort", []string{"--addr", "127.0.0.1"}, []string{"host:port"}},
		{"BadPort", []string{"--addr", "127.0.0.1:http2"}, []string{"port"}},
		{"MaxWait", []string{"--max-wait", "0s"}, []string{"--max-wait"}},
		{"AllowedHostURL", []string{"--allowed-host", "http://proxy.example/"}, []string{"--allowed-host", "host name"}},
		{"MaxQueues", []string{"--max-queues", "0"}, []string{"--max-queues", "at least 1"}},
		{"Argument", []string{"extra"}, []string{"unexpected argument"}},
		{"PayloadTokenWithoutKeys", []string{"--payload-token", "p"}, []string{"--payload-token needs --keys", envKeys}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"serve", "--redis", noRedis}, tc.args...)
			stdout, stderr, code := runInProcess(t, "", args...)
			require.Equal(t, 2, code, stderr)
			require.Empty(t, stdout)
			for _, m := range tc.msgs {
				require.Contains(t, stderr, m)
			}
		})
	}
}

func TestServeChecks(t *testing.T) {
	t.Parallel()
	env := func(token, addr string) func(string) string {
		return func(k string) string {
			switch k {
			case envAPIToken:
				return token
			case envAPIAddr:
				return addr
			}
			return ""
		}
	}
	for _, tc := range []struct {
		name     string
		sf       serveFlags
		env      string
		token    string
		loopback bool
	}{
		{"Default", serveFlags{addr: defaultServeAddr, maxWait: time.Second}, "", "", true},
		{"Localhost", serveFlags{addr: "localhost:0", maxWait: time.Second}, "", "", true},
		{"IPv6Loopback", serveFlags{addr: "[::1]:0", maxWait: time.Second}, "", "", true},
		{"TokenFromEnv", serveFlags{addr: ":8080", maxWait: time.Second}, "e", "e", false},
		{"FlagWins", serveFlags{addr: ":8080", maxWait: time.Second, token: "f", tokenGiven: true}, "e", "f", false},
		{"Insecure", serveFlags{addr: ":8080", maxWait: time.Second, insecure: true}, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			token, loopback, err := tc.sf.check(env(tc.env, ""))
			require.NoError(t, err)
			require.Equal(t, tc.token, token)
			require.Equal(t, tc.loopback, loopback)
		})
	}
	// An empty --auth-token given explicitly wins over the environment too: no token, so a
	// public address is refused.
	sf := serveFlags{addr: ":8080", maxWait: time.Second, tokenGiven: true}
	_, _, err := sf.check(env("e", ""))
	require.Error(t, err)

	// $CONVEYOR_API_ADDR sets --addr unless the flag is given.
	sf = serveFlags{addr: defaultServeAddr, maxWait: time.Second}
	_, loopback, err := sf.check(env("t", ":9090"))
	require.NoError(t, err)
	require.False(t, loopback)
	require.Equal(t, ":9090", sf.addr)
	sf = serveFlags{addr: "127.0.0.1:1", maxWait: time.Second, addrGiven: true}
	_, _, err = sf.check(env("", ":9090"))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:1", sf.addr)

	// $CONVEYOR_API_MAX_QUEUES and $CONVEYOR_API_CREATE_QUEUES set their flags unless given.
	vars := map[string]string{envAPIMaxQueues: "7", envAPICreateQueues: "false"}
	sf = serveFlags{addr: defaultServeAddr, maxWait: time.Second, maxQueues: 2000, createQueues: true}
	_, _, err = sf.check(func(k string) string { return vars[k] })
	require.NoError(t, err)
	require.Equal(t, 7, sf.maxQueues)
	require.False(t, sf.createQueues)
	sf = serveFlags{addr: defaultServeAddr, maxWait: time.Second, maxQueues: 9, createQueues: true,
		maxQueuesGiven: true, createGiven: true}
	_, _, err = sf.check(func(k string) string { return vars[k] })
	require.NoError(t, err)
	require.Equal(t, 9, sf.maxQueues)
	require.True(t, sf.createQueues)
	for k, v := range map[string]string{envAPIMaxQueues: "lots", envAPICreateQueues: "maybe"} {
		sf = serveFlags{addr: defaultServeAddr, maxWait: time.Second}
		_, _, err = sf.check(func(name string) string { return map[string]string{k: v}[name] })
		require.ErrorContains(t, err, k)
	}

	// $CONVEYOR_PAYLOAD_TOKEN sets --payload-token unless the flag is given.
	sf = serveFlags{addr: defaultServeAddr, maxWait: time.Second}
	_, _, err = sf.check(func(k string) string { return map[string]string{envPayloadToken: "pe"}[k] })
	require.NoError(t, err)
	require.Equal(t, "pe", sf.payloadToken)
	sf = serveFlags{addr: defaultServeAddr, maxWait: time.Second, payloadToken: "pf", payloadTokenGiven: true}
	_, _, err = sf.check(func(k string) string { return map[string]string{envPayloadToken: "pe"}[k] })
	require.NoError(t, err)
	require.Equal(t, "pf", sf.payloadToken)

	// The hosts a request may name without a token: --allowed-host (or its variable, split at
	// commas) and --addr's host unless it is every interface's.
	for _, tc := range []struct {
		name string
		sf   serveFlags
		env  string
		want []string
	}{
		{"Default", serveFlags{addr: defaultServeAddr}, "", []string{"127.0.0.1"}},
		{"Env", serveFlags{addr: "localhost:1"}, " a.example, b.example:8080,", []string{"a.example", "b.example:8080", "localhost"}},
		{"FlagWins", serveFlags{addr: "localhost:1", allowedHosts: []string{"f.example"}, allowedGiven: true}, "a.example", []string{"f.example", "localhost"}},
		{"AllInterfaces", serveFlags{addr: "0.0.0.0:1", insecure: true}, "", nil},
		{"NoHost", serveFlags{addr: ":1", insecure: true}, "", nil},
	} {
		t.Run("AllowedHosts/"+tc.name, func(t *testing.T) {
			tc.sf.maxWait = time.Second
			_, _, err := tc.sf.check(func(k string) string {
				if k == envAPIAllowedHosts {
					return tc.env
				}
				return ""
			})
			require.NoError(t, err)
			require.Equal(t, tc.want, tc.sf.allowedHosts)
		})
	}
}

func TestServeProbe(t *testing.T) {
	t.Parallel()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(hs.Close)
	_, stderr, code := runInProcess(t, "", "serve", "--probe", hs.URL+"/readyz")
	require.Equal(t, 0, code, stderr)
	_, stderr, code = runInProcess(t, "", "serve", "--probe", hs.URL+"/other")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "503")
	_, stderr, code = runInProcess(t, "", "serve", "--probe", "nonsense")
	require.Equal(t, 2, code, stderr)
	_, stderr, code = runInProcess(t, "", "serve", "--probe", "http://127.0.0.1:1/readyz")
	require.Equal(t, 1, code, stderr)
	require.NotContains(t, stderr, "Redis", "a failed probe is not about Redis")
}
