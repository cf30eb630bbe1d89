package outbox_test

import (
	"context"
	"database/sql"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/outbox"
	"github.com/conveyorq/conveyor/pipeline"
)

// An order and its receipt email in one transaction: the email is queued if and only if the
// order commits. (No output: it needs a PostgreSQL and a Redis.)
func ExampleEnqueue() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://app@localhost:5432/shop")
	if err != nil {
		log.Fatal(err)
	}
	if err := outbox.Migrate(ctx, db); err != nil { // or let `conveyor relay` create the table
		log.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, "o-42", 1999); err != nil {
		log.Fatal(err)
	}
	if _, err := outbox.Enqueue(ctx, tx, "emails", pipeline.Task{Type: "receipt", Payload: []byte(`{"order":"o-42"}`)},
		outbox.WithID("receipt-o-42"), outbox.WithMaxRetries(3)); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}

// A relay in a program of one's own; `conveyor relay --postgres URL` is the same.
func ExampleRelay() {
	client, err := pipeline.NewClient(redis.NewClient(&redis.Options{Addr: "localhost:6379"}), pipeline.ClientConfig{})
	if err != nil {
		log.Fatal(err)
	}
	r, err := outbox.NewRelay(outbox.RelayConfig{Postgres: "postgres://relay@localhost:5432/shop", Client: client})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	ctx, stop := context.WithCancel(context.Background()) // signal.NotifyContext in a real program
	defer stop()
	if err := r.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
