// Package stream is a Watermill Subscriber for Redis Streams consumer groups that reads in
// batches.
//
// It exists because the stock watermill-redisstream Subscriber reads with COUNT 1 and
// acknowledges each message with a synchronous XACK before it hands out the next one, so one
// subscription runs one message at a time; its Nack re-sends at once, forever; and its own
// idle-claim loop takes entries from live consumers. This Subscriber keeps Watermill's model
// (message.Subscriber, the router, middleware, Ack/Nack) and changes how Redis is read:
//
//   - XREADGROUP COUNT n with n up to the free capacity, reserved before the read (at most
//     Config.Concurrency messages are out at once across all topics), so a busy stream costs
//     one round trip per batch; a topic that found nothing waits for entries with one slot, and
//     topics waiting for slots are served in turn;
//   - acknowledgements are batched: one XACK per topic every AckInterval;
//   - with Config.DeferAck the application acknowledges entries itself (Conveyor's finish
//     scripts XACK and XDEL in the same atomic step as the job's state change), and a message's
//     Ack only frees its slot; with Config.ManualSettle the application frees the slot with
//     Subscriber.Settle instead, which spares the goroutine that otherwise waits on each
//     message's Ack;
//   - every held entry's lease is renewed (XCLAIM of its own entry with JUSTID, which resets the
//     idle time but not the delivery count) every LeaseInterval, so a recoverer that looks for
//     idle entries does not take a message from a live consumer; an entry that is no longer
//     pending for this consumer (acknowledged, deleted or claimed elsewhere, or its group or
//     stream gone) is never taken back: its message's context is cancelled with ErrLeaseLost,
//     it is not handed out again after a Nack, and its Ack only frees the slot;
//   - an entry is held once: one read again while it is held (the group's read position moved
//     back: XGROUP SETID, a group made again, a restore or failover to older data) is not
//     handed out a second time, and Settle settles only the message it is given;
//   - entries delivered to this consumer by a read whose reply was lost (go-redis resends such
//     a read silently, or gives up with an error) are adopted: every LeaseInterval, and at
//     once after a read that failed, each subscription lists this consumer's pending entries
//     and claims again, with their fields, those it never handed out that were delivered
//     since the stream was subscribed, and hands them out as a read would; entries it handed
//     out and settled without acking, and those an earlier process with the same consumer
//     name left, are not orphans and stay for the application's recovery;
//   - it never claims other consumers' entries: recovery belongs to the application;
//   - the Unmarshaller cannot fail: an entry that cannot be read becomes a message marked with
//     PoisonKey, so one bad entry never stops a subscription;
//   - EntryValues(msg.Context()) gives the entry's fields exactly as read, whatever middleware
//     and handlers did to the message's payload and metadata;
//   - Subscriber.Pause stops reading on every topic (for example while Redis refuses writes)
//     without giving up what is held: leases are still renewed, and Resume reads on;
//   - Config.Prepare sees each batch read before it is handed out, so an application can do
//     one call for the batch (and keep back messages it has dealt with) instead of one per
//     message.
//
// The stream format is watermill-redisstream's (_watermill_message_uuid, payload, metadata as
// msgpack), so either Subscriber reads what the stock Publisher or Conveyor writes.
//
// # Shutdown
//
// When a subscription's context ends or Close is called, the Subscriber stops reading and
// handing out messages, waits up to CloseTimeout for the messages it handed out to be acked,
// cancels the contexts of those still running (with cause ErrClosed), gives the entries it still
// holds to Config.OnRelease (for example to put them back in the stream at once), flushes
// acknowledgements and closes the output channel. An entry is either acknowledged or released,
// never both; an Ack after CloseTimeout comes too late and changes nothing.
package stream
