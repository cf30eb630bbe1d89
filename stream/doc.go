// Package stream is a Watermill Subscriber for Redis Streams consumer groups that reads in
// batches.
//
// # Why
//
// The stock watermill-redisstream Subscriber runs one message at a time per subscription. It
// reads with COUNT 1, and acknowledges each message with a synchronous XACK before it hands
// out the next one. Its Nack re-sends at once, forever. Its own idle-claim loop takes entries
// from live consumers. This Subscriber keeps Watermill's model (message.Subscriber, the
// router, middleware, Ack/Nack). It changes how Redis is read.
//
// # Reads and acknowledgements
//
// Each read is XREADGROUP COUNT n, with n up to the free capacity. The slots are reserved
// before the read: at most Config.Concurrency messages are out at once across all topics. So
// a busy stream costs one round trip per batch. A topic that found nothing waits for entries
// with one slot, and topics waiting for slots are served in turn.
//
// Acknowledgements are batched: one XACK per topic every AckInterval. With Config.DeferAck the
// application acknowledges entries itself, and a message's Ack only frees its slot. (Conveyor's
// finish scripts XACK and XDEL in the same atomic step as the job's state change.) With
// Config.ManualSettle the application frees the slot with Subscriber.Settle instead. That
// spares the goroutine that otherwise waits on each message's Ack.
//
// Config.Prepare sees each batch before it is handed out. So an application can make one call
// for the batch, not one per message. It may keep back messages it has dealt with.
//
// # Leases
//
// Leases are renewed every LeaseInterval. A renewal is the holder's XCLAIM of its own
// entry with JUSTID, which resets the idle time but not the delivery count. So a recoverer
// that looks for idle entries does not take a message from a live consumer.
//
// An entry may stop being pending for this consumer: acknowledged, deleted, claimed elsewhere,
// or its group or stream gone. It is never taken back. Its message's context is cancelled
// with ErrLeaseLost, it is not handed out again after a Nack, and its Ack only frees the slot.
//
// An entry is held once. The group's read position may move back (XGROUP SETID, a group made
// again, a restore or failover to older data). An entry read again while it is held is not
// handed out a second time. Settle settles only the message it is given.
//
// # Orphans
//
// A read's reply may be lost: go-redis resends such a read silently, or gives up with an
// error. The entries it delivered to this consumer are adopted. Every LeaseInterval, and at
// once after a failed read, each subscription lists this consumer's pending entries. It
// claims again, with their fields, those it never handed out that were delivered since the
// stream was subscribed. It hands them out as a read would.
//
// Other pending entries are not orphans, and stay for the application's recovery. Those are
// entries it handed out and settled without acking, and those an earlier process with the
// same consumer name left. The Subscriber never claims other consumers' entries: recovery
// belongs to the application.
//
// # Messages
//
// The Unmarshaller cannot fail. An entry that cannot be read becomes a message marked with
// PoisonKey, so one bad entry never stops a subscription. EntryValues(msg.Context()) gives the
// entry's fields exactly as read, whatever middleware and handlers did to the message.
//
// Subscriber.Pause stops reading on every topic, for example while Redis refuses writes. It
// gives up nothing it holds: leases are still renewed, and Resume reads on.
//
// The stream format is watermill-redisstream's: _watermill_message_uuid, payload, and
// metadata as msgpack. So either Subscriber reads what the stock Publisher or Conveyor
// writes.
//
// # Shutdown
//
// A subscription ends when its context ends or Close is called. The Subscriber stops reading
// and handing out messages. It waits up to CloseTimeout for the messages it handed out to be
// acked, then cancels the contexts of those still running, with cause ErrClosed. It gives the
// entries it still holds to Config.OnRelease, for example to put them back in the stream at
// once. Then it flushes acknowledgements and closes the output channel. An entry is either
// acknowledged or released, never both. An Ack after CloseTimeout comes too late and changes
// nothing.
package stream
