package publish

import (
	"testing"

	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }
