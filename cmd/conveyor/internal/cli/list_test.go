package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A list of a queue that does not exist is an error naming the known queues, as stats and
// dead list are: an empty page would read as an idle queue and hide the typo. A queue that
// exists with nothing in that state is an empty page, exit 0. (Before, `list --queue nosuch`
// printed nothing and exited 0.) The empty message goes to stderr (it went to stdout).
func TestListUnknownQueue(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	c.ok("publish", "-q", "emails", "--type", "welcome")
	c.refused(1, `queue "emials" not found; known queues: emails`, "list", "-q", "emials", "--status", "queued")
	c.refused(1, `queue "emials" not found`, "list", "-q", "emials", "--status", "failed", "--json")
	require.Contains(t, c.ok("list", "-q", "emails", "--status", "queued"), "welcome")
	// An empty listing of a queue that exists: exit 0, nothing on stdout, the message on stderr.
	stdout, stderr, code := c.run("list", "-q", "emails", "--status", "failed")
	require.Zero(t, code, stderr)
	require.Empty(t, stdout)
	require.Equal(t, "no dead jobs in queue emails\n", stderr)
	_, stderr, code = c.run("list", "-q", "emails", "--status", "dead")
	require.Zero(t, code, stderr)
	require.Equal(t, "no dead jobs in queue emails\n", stderr, "dead is failed's alias")
}

// list's table has each job's priority level, as its JSON has. (Before, the table had none.)
func TestListShowsPriority(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	urgent := strings.TrimSpace(c.ok("publish", "-q", "emails", "--type", "welcome", "--priority", "1"))
	later := strings.TrimSpace(c.ok("publish", "-q", "emails", "--type", "digest", "--priority", "3"))
	out := c.ok("list", "-q", "emails", "--status", "queued")
	require.Regexp(t, `(?m)^ID +TYPE +STATUS +PRIORITY +ATTEMPT +ENQUEUED_AT +CREATED_AT +WHY$`, out)
	// WHY: no worker runs in this test.
	require.Regexp(t, `(?m)^`+urgent+` .* no live worker reads queue emails$`, out)
	require.Regexp(t, `(?m)^`+urgent+` +welcome +queued +1 +0 `, out)
	require.Regexp(t, `(?m)^`+later+` +digest +queued +3 +0 `, out)
}
