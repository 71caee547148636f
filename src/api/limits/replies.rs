//! The byte bound of KeepAlive replies: [`ReplyBudget`] counts, per
//! replica, the bytes of replies that are being computed or wait for their
//! client to read them, and [`StreamReplies`] the same per stream.
//!
//! A KeepAlive stream answers what it reads, so its replies are bounded by
//! not reading: a stream reads its next request only while the bytes it
//! already owes fit under its own bound (`--max-keepalive-reply-bytes`)
//! and, unless its client has read every reply sent so far, under the
//! replica's (`--max-keepalive-reply-total-bytes`). A client that does not
//! read its replies therefore stops being read (HTTP/2 flow control then
//! holds its requests on its side), while a client that reads them always
//! gets its next request read: one stream's unread replies never stall
//! another's renewals. A request's reply is charged an estimate when it is
//! read and its encoded size once computed; the charge is released when
//! the reply is handed to the transport (see [`Sent`]) or the stream ends.
//! Sizes are what the replies weigh in memory, as the caller measures them.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::Notify;

/// The replica's bound on KeepAlive reply bytes, and what is charged now.
#[derive(Debug)]
pub struct ReplyBudget {
    /// Most bytes one stream may owe.
    per_stream: usize,
    /// Most bytes all streams may owe together (streams whose client has
    /// read everything sent may go past it by one request).
    total: usize,
    /// Bytes owed now, across the replica.
    owed: AtomicUsize,
}

impl ReplyBudget {
    /// A budget of `per_stream` bytes per stream and `total` per replica.
    pub fn new(per_stream: usize, total: usize) -> Arc<ReplyBudget> {
        Arc::new(ReplyBudget {
            per_stream,
            total,
            owed: AtomicUsize::new(0),
        })
    }

    /// Bytes owed now, across the replica.
    pub fn owed(&self) -> usize {
        self.owed.load(Ordering::Relaxed)
    }

    /// The accounts of one new stream.
    pub fn stream(self: &Arc<Self>) -> Arc<StreamReplies> {
        Arc::new(StreamReplies {
            budget: self.clone(),
            computing: AtomicUsize::new(0),
            unsent: AtomicUsize::new(0),
            taken: Notify::new(),
        })
    }
}

/// What one stream owes: replies being computed (charged an estimate) and
/// replies computed but not yet handed to the transport. Dropping it (the
/// stream ended) releases both from the replica's count.
#[derive(Debug)]
pub struct StreamReplies {
    /// The replica's budget.
    budget: Arc<ReplyBudget>,
    /// Estimated bytes of replies being computed.
    computing: AtomicUsize,
    /// Bytes of replies waiting for the transport.
    unsent: AtomicUsize,
    /// Notified each time the transport takes a reply.
    taken: Notify,
}

impl StreamReplies {
    /// Whether the stream may read a request whose reply is estimated at
    /// `estimate` bytes: it fits under the stream's bound (a stream that
    /// owes nothing may always read one), and under the replica's unless
    /// the client has taken every reply sent so far.
    pub fn room_for(&self, estimate: usize) -> bool {
        let mine = self.computing.load(Ordering::Relaxed) + self.unsent.load(Ordering::Relaxed);
        if mine > 0 && mine + estimate > self.budget.per_stream {
            return false;
        }
        self.unsent.load(Ordering::Relaxed) == 0
            || self.budget.owed() + estimate <= self.budget.total
    }

    /// Charges a request being computed, `estimate` bytes.
    pub fn computing(&self, estimate: usize) {
        self.computing.fetch_add(estimate, Ordering::Relaxed);
        self.budget.owed.fetch_add(estimate, Ordering::Relaxed);
    }

    /// Replaces the estimate of a computed reply by its `size`, now
    /// charged as unsent until the transport takes it.
    pub fn computed(&self, estimate: usize, size: usize) {
        self.computing.fetch_sub(estimate, Ordering::Relaxed);
        self.unsent.fetch_add(size, Ordering::Relaxed);
        self.budget.owed.fetch_add(size, Ordering::Relaxed);
        self.budget.owed.fetch_sub(estimate, Ordering::Relaxed);
    }

    /// Releases a reply of `size` bytes that the transport took.
    fn sent(&self, size: usize) {
        self.unsent.fetch_sub(size, Ordering::Relaxed);
        self.budget.owed.fetch_sub(size, Ordering::Relaxed);
        self.taken.notify_one();
    }

    /// Completes once the transport has taken a reply since the last call
    /// (at once if it did in between): there may be room again.
    pub async fn taken(&self) {
        self.taken.notified().await;
    }
}

impl Drop for StreamReplies {
    fn drop(&mut self) {
        let owed = *self.computing.get_mut() + *self.unsent.get_mut();
        self.budget.owed.fetch_sub(owed, Ordering::Relaxed);
    }
}

/// The outbound stream of a KeepAlive: yields the replies of `inner`
/// (each with its charged size) and releases each charge as the transport
/// takes the reply.
pub struct Sent<S> {
    /// The replies with their sizes.
    inner: S,
    /// Whose charges they are.
    replies: Arc<StreamReplies>,
}

impl<S> Sent<S> {
    /// Releases the charge of each item of `inner` as it is taken.
    pub fn new(inner: S, replies: Arc<StreamReplies>) -> Sent<S> {
        Sent { inner, replies }
    }
}

impl<S, T> Stream for Sent<S>
where
    S: Stream<Item = (T, usize)> + Unpin,
{
    type Item = T;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        match Pin::new(&mut self.inner).poll_next(cx) {
            Poll::Ready(Some((item, size))) => {
                self.replies.sent(size);
                Poll::Ready(Some(item))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream that owes its bound is not read; one that owes nothing
    /// always is; when the replica's bound is reached, a stream that left
    /// replies unread is not read, one whose client took them all is.
    #[test]
    fn bounds_per_stream_and_per_replica() {
        let budget = ReplyBudget::new(100, 150);
        let slow = budget.stream();
        assert!(slow.room_for(1_000), "a stream that owes nothing reads");
        slow.computing(90);
        assert!(!slow.room_for(20), "over its own bound");
        slow.computed(90, 50);
        assert_eq!(budget.owed(), 50);
        let fast = budget.stream();
        fast.computing(60);
        assert_eq!(budget.owed(), 110);
        assert!(!slow.room_for(45), "unread replies and the replica full");
        assert!(
            fast.room_for(30),
            "everything read: the replica's bound does not stop it"
        );
        fast.computed(60, 40);
        assert_eq!(budget.owed(), 90);
        assert!(fast.room_for(30));
        fast.sent(40);
        assert_eq!(budget.owed(), 50);
        drop(slow);
        assert_eq!(budget.owed(), 0, "a stream's end releases what it owed");
        drop(fast);
        assert_eq!(budget.owed(), 0);
    }
}
