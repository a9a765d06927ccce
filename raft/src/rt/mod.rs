//! The async runtime every jetraft Raft group runs on: openraft's Tokio runtime, except for its
//! bounded MPSC channels ([`mpsc::GrowingMpsc`]).
//!
//! Why: each openraft group creates seven bounded channels, and a Tokio channel allocates a
//! 32-message block as it is created, sized by the message type (openraft's `RaftMsg`, state
//! machine command and notification are 160-230 bytes each): about 26 KB per group before it
//! carries anything, a quarter of an idle memory stream's footprint. [`mpsc::GrowingMpsc`]'s
//! queue grows with use instead, and idle groups keep their channels empty.

pub mod mpsc;

use std::future::Future;
use std::time::Duration;

use openraft::rt::{AsyncRuntime, OptionalSend};
use openraft_rt_tokio::{TokioInstant, TokioMutex, TokioOneshot, TokioRuntime, TokioWatch};

/// [`TokioRuntime`] with [`mpsc::GrowingMpsc`] channels (see the module docs).
#[derive(Debug)]
pub struct JetraftRuntime(TokioRuntime);

impl AsyncRuntime for JetraftRuntime {
    type JoinError = <TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <TokioRuntime as AsyncRuntime>::Sleep;
    type Instant = TokioInstant;
    type TimeoutError = <TokioRuntime as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> =
        <TokioRuntime as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = <TokioRuntime as AsyncRuntime>::ThreadLocalRng;
    type Mpsc = mpsc::GrowingMpsc;
    type Watch = TokioWatch;
    type Oneshot = TokioOneshot;
    type Mutex<T: OptionalSend + 'static> = TokioMutex<T>;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        TokioRuntime::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        TokioRuntime::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        TokioRuntime::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        TokioRuntime::is_panic(join_error)
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        TokioRuntime::thread_rng()
    }

    fn new(threads: usize) -> Self {
        Self(TokioRuntime::new(threads))
    }

    fn block_on<F, T>(&mut self, future: F) -> T
    where
        F: Future<Output = T>,
    {
        self.0.block_on(future)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// openraft's own conformance checks of a runtime (its channels included).
    #[test]
    fn passes_openraft_runtime_conformance() {
        openraft::rt::testing::Suite::<JetraftRuntime>::test_all();
    }
}
