package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/conveyorq/conveyor/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestNewDatabase(t *testing.T) {
	srv := pgtest.Shared(t)
	a, b := srv.NewDatabase(t), srv.NewDatabase(t)
	if a == b {
		t.Fatalf("two databases with one URL %s", a)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1: %d, %v", one, err)
	}
}

func TestStartStop(t *testing.T) {
	srv := pgtest.Start(t)
	srv.Stop()
	srv.Stop() // idempotent
	if _, err := pgx.Connect(context.Background(), srv.URL("postgres")); err == nil {
		t.Fatal("connected to a stopped server")
	}
}
