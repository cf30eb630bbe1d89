package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
)

func TestGroupsCommands(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	ok, refused := c.ok, c.refused

	refused(1, `queue "reports" not found`, "groups", "set", "reports", "--window", "2")
	ok("publish", "-q", "reports", "--type", "build", "--group", "tenant-1")
	refused(1, `queue "reprots" not found; known queues: reports`, "groups", "list", "reprots")
	require.Equal(t, "queue reports: group window 20 (the default)\nGROUP     WEIGHT  IN_WINDOW  WAITING\ntenant-1  1       1          0\n",
		ok("groups", "list", "reports"))
	// Each weight set is confirmed, as stored, in the groups' order.
	require.Equal(t, "queue reports: group window 1\nqueue reports: group tenant-2: weight 3\n",
		ok("groups", "set", "reports", "--window", "1", "--weight", "tenant-2=3"))
	require.Equal(t, "queue reports: group window 1\nqueue reports: group tenant-1: weight 1 (the default)\nqueue reports: group tenant-3: weight 2\n",
		ok("groups", "set", "reports", "--weight", "tenant-3=2", "--weight", "tenant-1=0"))
	ok("groups", "set", "reports", "--weight", "tenant-3=0")
	ok("publish", "-q", "reports", "--type", "build", "--group", "tenant-1")
	require.Equal(t, `queue reports: group window 1
GROUP     WEIGHT  IN_WINDOW  WAITING
tenant-1  1       1          1
tenant-2  3       0          0
`, ok("groups", "list", "reports"))
	var gs pipeline.Groups
	require.NoError(t, json.Unmarshal([]byte(ok("groups", "list", "reports", "--json")), &gs))
	require.Equal(t, 1, gs.Window)
	require.Len(t, gs.Groups, 2)

	refused(2, "--window must be at least 1", "groups", "set", "reports", "--window", "0")
	refused(2, "give --window, --reset-window or --weight", "groups", "set", "reports")
	refused(2, `--weight "t": want GROUP=W`, "groups", "set", "reports", "--weight", "t")
	refused(2, "not both", "groups", "set", "reports", "--window", "3", "--reset-window")
	refused(2, `invalid group "a b"`, "groups", "set", "reports", "--weight", "a b=2")
	refused(2, `invalid group "a/b"`, "publish", "-q", "reports", "--type", "build", "--group", "a/b")
	require.Equal(t, "queue reports: group window 20 (the default)\n", ok("groups", "set", "reports", "--reset-window"))
}
