package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/keyring"
)

// TestKeys: 'keys new' prints a key line; a publish with --keys seals the payload; status and
// list show the placeholder without the key, and the plaintext with --keys or $CONVEYOR_KEYS.
func TestKeys(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	line := strings.TrimSpace(c.ok("keys", "new", "k1"))
	require.Regexp(t, `^k1 [A-Za-z0-9+/]{43}=$`, line)
	_, err := keyring.Parse(line)
	require.NoError(t, err)
	c.refused(2, "key id", "keys", "new", "no spaces")
	file := filepath.Join(t.TempDir(), "conveyor.keys")
	require.NoError(t, os.WriteFile(file, []byte("# the first seals\n"+line+"\n"), 0o600))

	out, stderr, code := c.run("--keys", file, "publish", "-q", "emails", "--type", "echo", "--payload", `{"card":"4111"}`)
	require.Zero(t, code, stderr)
	id := strings.TrimSpace(out)
	require.NotEmpty(t, id)
	const placeholder = "<encrypted, 15 bytes, key k1>"
	out = c.ok("status", "-q", "emails", id)
	require.Contains(t, out, placeholder)
	require.NotContains(t, out, "4111")
	out = c.ok("status", "-q", "emails", id, "--json")
	require.Contains(t, out, `"encrypted":{"payload":{"key":"k1","bytes":15}}`)
	require.NotContains(t, out, "4111")
	out = c.ok("list", "-q", "emails", "--status", "queued", "--json")
	require.Contains(t, out, `"encrypted":{"payload":{"key":"k1","bytes":15}}`)
	require.NotContains(t, out, "4111")

	out = c.ok("--keys", file, "status", "-q", "emails", id)
	require.Contains(t, out, `{"card":"4111"}`)
	out, stderr, code = runWithEnv(t, map[string]string{envKeys: line}, "", "status", "-q", "emails", id, "--json",
		"--redis", c.url, "--prefix", c.prefix)
	require.Zero(t, code, stderr)
	require.Contains(t, out, `"payload":{"card":"4111"}`)
	require.NotContains(t, out, `"encrypted"`)

	c.refused(2, "--keys", "--keys", filepath.Join(t.TempDir(), "missing"), "status", "-q", "emails", id)
	_, stderr, code = runWithEnv(t, map[string]string{envKeys: "k1 not-base64"}, "", "status", "-q", "emails", id,
		"--redis", c.url, "--prefix", c.prefix)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "$"+envKeys)
	require.NotContains(t, stderr, "not-base64", "an error never shows a key")
}
