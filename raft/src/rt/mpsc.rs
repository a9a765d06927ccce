//! A bounded MPSC channel whose queue grows with use: nothing is allocated for messages until
//! one is sent, and an idle channel holds only its empty queue and a semaphore of its free
//! slots. Senders wait for a slot when `buffer` messages are queued, as with Tokio's.
//!
//! [`unbounded`] makes one without a bound, for senders in synchronous code
//! ([`Sender::send_now`]): jetraft's own per-stream queues, which a Tokio unbounded channel
//! would also give a 32-message block each up front.

use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::sync::{Arc, Weak};
use std::task::{Poll, Waker};

use openraft::rt::{Mpsc, MpscReceiver, MpscSender, MpscWeakSender, OptionalSend};
pub use openraft::rt::{SendError, TryRecvError};
use parking_lot::Mutex;
use tokio::sync::Semaphore;

/// The channel family ([`Mpsc`]) of [`super::JetraftRuntime`].
pub struct GrowingMpsc;

/// What the ends share.
struct Shared<T> {
    state: Mutex<State<T>>,
    /// Free slots (`None`: unbounded); closed when the receiver goes, which fails every
    /// waiting send.
    slots: Option<Semaphore>,
}

struct State<T> {
    queue: VecDeque<T>,
    /// The receiver, while it waits for a message.
    waiting: Option<Waker>,
    /// Live senders (weak ones not counted); none left and an empty queue = closed.
    senders: usize,
    receiver_alive: bool,
}

/// The sending end; clones share the channel.
pub struct Sender<T>(Arc<Shared<T>>);

/// The receiving end.
pub struct Receiver<T>(Arc<Shared<T>>);

/// A sender that does not keep the channel open.
pub struct WeakSender<T>(Weak<Shared<T>>);

impl Mpsc for GrowingMpsc {
    type Sender<T: OptionalSend> = Sender<T>;
    type Receiver<T: OptionalSend> = Receiver<T>;
    type WeakSender<T: OptionalSend> = WeakSender<T>;

    fn channel<T: OptionalSend>(buffer: usize) -> (Sender<T>, Receiver<T>) {
        with_slots(Some(Semaphore::new(
            buffer.clamp(1, Semaphore::MAX_PERMITS),
        )))
    }
}

/// A channel without a bound: [`Sender::send_now`] always queues while the receiver lives.
pub fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
    with_slots(None)
}

/// A channel with one sender, bounded by `slots` if any.
fn with_slots<T>(slots: Option<Semaphore>) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            queue: VecDeque::new(),
            waiting: None,
            senders: 1,
            receiver_alive: true,
        }),
        slots,
    });
    (Sender(shared.clone()), Receiver(shared))
}

impl<T> std::fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender").finish_non_exhaustive()
    }
}

impl<T> std::fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver").finish_non_exhaustive()
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.0.state.lock().senders += 1;
        Self(self.0.clone())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let waiting = {
            let mut st = self.0.state.lock();
            st.senders -= 1;
            if st.senders == 0 {
                st.waiting.take()
            } else {
                None
            }
        };
        if let Some(w) = waiting {
            w.wake();
        }
    }
}

impl<T> Clone for WeakSender<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T: OptionalSend> MpscSender<GrowingMpsc, T> for Sender<T> {
    async fn send(&self, msg: T) -> Result<(), SendError<T>> {
        if let Some(slots) = &self.0.slots {
            match slots.acquire().await {
                Ok(slot) => slot.forget(),
                Err(_) => return Err(SendError(msg)),
            }
        }
        self.queue(msg)
    }

    fn downgrade(&self) -> WeakSender<T> {
        WeakSender(Arc::downgrade(&self.0))
    }
}

impl<T> Sender<T> {
    /// Queues `msg` without waiting: on a bounded channel only if a slot is free. Fails with
    /// `msg` when the receiver is gone (or, bounded, the channel is full).
    pub fn send_now(&self, msg: T) -> Result<(), SendError<T>> {
        if let Some(slots) = &self.0.slots {
            match slots.try_acquire() {
                Ok(slot) => slot.forget(),
                Err(_) => return Err(SendError(msg)),
            }
        }
        self.queue(msg)
    }

    /// Queues `msg` (its slot, if bounded, already taken) and wakes the receiver.
    fn queue(&self, msg: T) -> Result<(), SendError<T>> {
        let waiting = {
            let mut st = self.0.state.lock();
            if !st.receiver_alive {
                return Err(SendError(msg));
            }
            st.queue.push_back(msg);
            st.waiting.take()
        };
        if let Some(w) = waiting {
            w.wake();
        }
        Ok(())
    }
}

impl<T: OptionalSend> MpscWeakSender<GrowingMpsc, T> for WeakSender<T> {
    fn upgrade(&self) -> Option<Sender<T>> {
        let shared = self.0.upgrade()?;
        {
            let mut st = shared.state.lock();
            if st.senders == 0 {
                return None;
            }
            st.senders += 1;
        }
        Some(Sender(shared))
    }
}

impl<T> Receiver<T> {
    /// The next message, `Empty` or `Disconnected`; `waker` is woken by the next send (or the
    /// last sender's drop) when there is none.
    fn take(&self, waker: Option<&Waker>) -> Result<T, TryRecvError> {
        let mut st = self.0.state.lock();
        if let Some(msg) = st.queue.pop_front() {
            drop(st);
            if let Some(slots) = &self.0.slots {
                slots.add_permits(1);
            }
            return Ok(msg);
        }
        if st.senders == 0 {
            return Err(TryRecvError::Disconnected);
        }
        if let Some(w) = waker {
            match &mut st.waiting {
                Some(old) => old.clone_from(w),
                None => st.waiting = Some(w.clone()),
            }
        }
        Err(TryRecvError::Empty)
    }

    /// The next message; `None` once every sender is gone and the queue is empty.
    pub async fn recv(&mut self) -> Option<T> {
        poll_fn(|cx| match self.take(Some(cx.waker())) {
            Ok(msg) => Poll::Ready(Some(msg)),
            Err(TryRecvError::Disconnected) => Poll::Ready(None),
            Err(TryRecvError::Empty) => Poll::Pending,
        })
        .await
    }

    /// The next message if one is queued.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        self.take(None)
    }
}

impl<T: OptionalSend> MpscReceiver<T> for Receiver<T> {
    fn recv(&mut self) -> impl Future<Output = Option<T>> + OptionalSend {
        Receiver::recv(self)
    }

    fn try_recv(&mut self) -> Result<T, TryRecvError> {
        Receiver::try_recv(self)
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        if let Some(slots) = &self.0.slots {
            slots.close();
        }
        let queued = {
            let mut st = self.0.state.lock();
            st.receiver_alive = false;
            std::mem::take(&mut st.queue)
        };
        drop(queued);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn an_idle_channel_allocates_no_queue_and_a_used_one_only_what_it_held() {
        let (tx, mut rx) = GrowingMpsc::channel::<[u8; 200]>(1024);
        assert_eq!(rx.0.state.lock().queue.capacity(), 0);
        for _ in 0..3 {
            tx.send([0; 200]).await.unwrap();
        }
        for _ in 0..3 {
            assert!(rx.recv().await.is_some());
        }
        assert!(rx.0.state.lock().queue.capacity() < 1024);
    }

    #[tokio::test]
    async fn a_full_channel_holds_senders_until_a_slot_frees() {
        let (tx, mut rx) = GrowingMpsc::channel::<u32>(2);
        tx.send(1).await.unwrap();
        tx.send(2).await.unwrap();
        let third = tx.send(3);
        tokio::pin!(third);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut third)
                .await
                .is_err(),
            "a third send waits"
        );
        assert_eq!(rx.recv().await, Some(1));
        third.await.unwrap();
        assert_eq!(rx.recv().await, Some(2));
        assert_eq!(rx.recv().await, Some(3));
    }

    #[tokio::test]
    async fn senders_waiting_for_a_slot_fail_when_the_receiver_goes() {
        let (tx, rx) = GrowingMpsc::channel::<u32>(1);
        tx.send(1).await.unwrap();
        let tx2 = tx.clone();
        let waiting = tokio::spawn(async move { tx2.send(2).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(rx);
        assert_eq!(waiting.await.unwrap(), Err(SendError(2)));
        assert_eq!(tx.send(3).await, Err(SendError(3)));
    }

    #[tokio::test]
    async fn an_unbounded_channel_queues_without_waiting_until_the_receiver_goes() {
        let (tx, mut rx) = unbounded::<u32>();
        for i in 0..1000 {
            tx.send_now(i).unwrap();
        }
        assert_eq!(rx.try_recv(), Ok(0));
        assert_eq!(rx.recv().await, Some(1));
        drop(rx);
        assert_eq!(tx.send_now(7), Err(SendError(7)));
    }

    #[tokio::test]
    async fn send_now_on_a_full_bounded_channel_hands_the_message_back() {
        let (tx, mut rx) = GrowingMpsc::channel::<u32>(1);
        tx.send_now(1).unwrap();
        assert_eq!(tx.send_now(2), Err(SendError(2)));
        assert_eq!(rx.try_recv(), Ok(1));
        tx.send_now(3).unwrap();
    }

    #[tokio::test]
    async fn the_receiver_wakes_when_the_last_sender_goes() {
        let (tx, mut rx) = GrowingMpsc::channel::<u32>(4);
        let weak = tx.downgrade();
        let tx2 = tx.clone();
        let recv = tokio::spawn(async move { rx.recv().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(tx);
        assert!(weak.upgrade().is_some(), "one sender is left");
        drop(tx2);
        assert_eq!(recv.await.unwrap(), None);
        assert!(weak.upgrade().is_none());
    }
}
