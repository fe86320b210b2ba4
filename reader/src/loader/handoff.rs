//! The bounded queue between one prefetch thread and the consumer.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

/// The queue between one prefetch thread and the consumer: bounded, and
/// sparing with wake-ups. A side that sleeps is woken only when it has
/// something to do (the consumer: a batch arrived; the thread: the queue
/// drained to `low` batches), never on every push and pop, because a
/// cross-core wake-up costs about as much as copying a small batch (in a
/// virtual machine, more): waking the thread on each pop from a full queue
/// cost a sequential epoch a third of its time.
struct Handoff<T> {
    state: Mutex<HandoffState<T>>,
    /// The consumer waits here for a batch.
    ready: Condvar,
    /// The thread waits here for room.
    room: Condvar,
    cap: usize,
    low: usize,
}

struct HandoffState<T> {
    items: VecDeque<T>,
    consumer_waiting: bool,
    producer_waiting: bool,
    /// The thread has ended (done, or panicked).
    producer_gone: bool,
    /// The consumer has dropped its end.
    consumer_gone: bool,
}

/// A queue of at most `cap` (>= 1) items, as its two ends.
pub(super) fn handoff<T>(cap: usize) -> (Sender<T>, Receiver<T>) {
    let cap = cap.max(1);
    let h = Arc::new(Handoff {
        state: Mutex::new(HandoffState {
            items: VecDeque::with_capacity(cap),
            consumer_waiting: false,
            producer_waiting: false,
            producer_gone: false,
            consumer_gone: false,
        }),
        ready: Condvar::new(),
        room: Condvar::new(),
        cap,
        // A full queue of 2 is refilled once empty, one of 8 at 3 left.
        low: (cap - 1) / 2,
    });
    (Sender(Arc::clone(&h)), Receiver(h))
}

impl<T> Handoff<T> {
    /// The first queued item, waking a thread that waits for room once the
    /// queue has drained to `low`.
    fn pop(&self, s: &mut HandoffState<T>) -> Option<T> {
        let item = s.items.pop_front()?;
        if s.items.len() <= self.low && std::mem::take(&mut s.producer_waiting) {
            self.room.notify_one();
        }
        Some(item)
    }

    fn lock(&self) -> MutexGuard<'_, HandoffState<T>> {
        // The state stays consistent across a panic (each update is one
        // field), so a poisoned lock is still good to use.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The prefetch thread's end. Dropping it (also by a panic) tells the
/// consumer that no more batches come.
pub(super) struct Sender<T>(Arc<Handoff<T>>);

impl<T> Sender<T> {
    /// Waits until the queue has room for one more item; `false` once the
    /// consumer is gone. A thread that calls it before building each item
    /// keeps at most `cap` items of its own in flight (queued or being
    /// built), not `cap + 1`.
    pub(super) fn wait_room(&self) -> bool {
        let h = &self.0;
        let mut s = h.lock();
        while s.items.len() >= h.cap && !s.consumer_gone {
            s.producer_waiting = true;
            s = h.room.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        !s.consumer_gone
    }

    /// Queues `item`, waiting for room; `Err` once the consumer is gone.
    pub(super) fn send(&self, item: T) -> std::result::Result<(), T> {
        let h = &self.0;
        let mut s = h.lock();
        while s.items.len() >= h.cap && !s.consumer_gone {
            s.producer_waiting = true;
            s = h.room.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        if s.consumer_gone {
            return Err(item);
        }
        s.items.push_back(item);
        if std::mem::take(&mut s.consumer_waiting) {
            h.ready.notify_one();
        }
        Ok(())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let h = &self.0;
        let mut s = h.lock();
        s.producer_gone = true;
        if std::mem::take(&mut s.consumer_waiting) {
            h.ready.notify_one();
        }
    }
}

/// The consumer's end. Dropping it makes the thread's `send` fail.
pub(super) struct Receiver<T>(Arc<Handoff<T>>);

impl<T> Receiver<T> {
    /// The next item, waiting for it; `None` once the thread has ended
    /// and the queue is empty.
    pub(super) fn recv(&self) -> Option<T> {
        let h = &self.0;
        let mut s = h.lock();
        loop {
            if let Some(item) = h.pop(&mut s) {
                return Some(item);
            }
            if s.producer_gone {
                return None;
            }
            s.consumer_waiting = true;
            s = h.ready.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl<T> Receiver<T> {
    /// The next item if one is queued, without waiting.
    pub(super) fn try_recv(&self) -> Option<T> {
        let h = &self.0;
        h.pop(&mut h.lock())
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let h = &self.0;
        let mut s = h.lock();
        s.consumer_gone = true;
        // The batches still queued go back to the pool now.
        s.items.clear();
        if std::mem::take(&mut s.producer_waiting) {
            h.room.notify_one();
        }
    }
}
