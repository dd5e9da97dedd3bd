//! A call's progress, watched by a task that does something to the engine at points of it (a
//! kill, a shard move, a partition): the call waits at a point until that task has begun its
//! fault, so that the fault meets the call's writes rather than a call that raced to its end.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub struct Watch {
    /// The call's progress (documents or operations settled).
    progress: AtomicU64,
    /// The call has ended.
    done: AtomicBool,
    /// The fault points, in progress.
    pub points: Vec<u64>,
    /// Faults begun so far.
    begun: AtomicU64,
}

impl Watch {
    pub fn at(points: Vec<u64>) -> Arc<Watch> {
        Arc::new(Watch {
            progress: AtomicU64::new(0),
            done: AtomicBool::new(false),
            points,
            begun: AtomicU64::new(0),
        })
    }

    /// `steps` points spread over a call of `total`: at 1/(steps+2), 2/(steps+2), ... of it, so
    /// that the rest of the call is long enough for the last fault to end in it too.
    pub fn spread(total: u64, steps: usize) -> Arc<Watch> {
        let steps = steps as u64;
        Watch::at((1..=steps).map(|k| total * k / (steps + 2)).collect())
    }

    /// Past a point whose fault has not begun: the call should wait.
    fn holds(&self) -> bool {
        let progress = self.progress.load(Ordering::SeqCst);
        let due = self.points.iter().filter(|&&p| p <= progress).count() as u64;
        due > self.begun.load(Ordering::SeqCst) && !self.is_done()
    }

    /// A batch call's progress callback (a synchronous one): records `n`, and waits while a
    /// fault is due.
    pub fn reached(&self, n: u64) {
        self.progress.store(n, Ordering::SeqCst);
        tokio::task::block_in_place(|| {
            while self.holds() {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
    }

    /// One more unit of progress, from a task: waits while a fault is due.
    pub async fn advance(&self) {
        self.progress.fetch_add(1, Ordering::SeqCst);
        while self.holds() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    pub fn progress(&self) -> u64 {
        self.progress.load(Ordering::SeqCst)
    }

    /// The fault task has begun its next fault: the call may go on.
    pub fn begin(&self) {
        self.begun.fetch_add(1, Ordering::SeqCst);
    }

    pub fn end(&self) {
        self.done.store(true, Ordering::SeqCst);
    }

    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }

    /// Waits until the call reaches `point`: `false` if it ended first.
    pub async fn until(&self, point: u64) -> bool {
        while self.progress() < point {
            if self.is_done() {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        true
    }
}
