//! One long-lived thread that runs a job beside the engine's steps: the drafter's deferred
//! tree updates, submitted before the model's forward and waited for before the next draft,
//! so they overlap the forward and the emitting of its tokens. A thread spawned per step
//! instead left 0.116 ms a step in no host phase on the H200 host (results/2026-12-01-drafter-deferred,
//! run 1).

use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
pub(crate) struct BackgroundWorker {
    thread: Option<(Sender<Job>, Receiver<()>, JoinHandle<()>)>,
    /// A submitted job has not reported back yet.
    busy: bool,
}

impl BackgroundWorker {
    /// Runs `job` on the worker (started at the first job), after the previous one ended.
    pub fn submit(&mut self, job: Job) {
        self.wait();
        let (tx, _, _) = self.thread.get_or_insert_with(|| {
            let (tx, rx) = channel::<Job>();
            let (done_tx, done_rx) = channel();
            let handle = std::thread::Builder::new()
                .name("wring-drafter-work".into())
                .spawn(move || {
                    for job in rx {
                        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                            tracing::error!("the drafter's background work panicked");
                        }
                        if done_tx.send(()).is_err() {
                            break;
                        }
                    }
                })
                .expect("spawning the drafter's worker thread");
            (tx, done_rx, handle)
        });
        match tx.send(job) {
            Ok(()) => self.busy = true,
            // The worker is gone (it only exits when the engine drops it): run here.
            Err(e) => (e.0)(),
        }
    }

    /// Blocks until the submitted job (if any) has ended.
    pub fn wait(&mut self) {
        if self.busy {
            if let Some((_, done, _)) = &self.thread {
                let _ = done.recv();
            }
            self.busy = false;
        }
    }
}

impl Drop for BackgroundWorker {
    fn drop(&mut self) {
        self.wait();
        if let Some((tx, _, handle)) = self.thread.take() {
            drop(tx);
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn jobs_run_in_order_and_wait_sees_them_done() {
        let mut w = BackgroundWorker::default();
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        for i in 0..5 {
            let log = Arc::clone(&log);
            w.submit(Box::new(move || {
                std::thread::sleep(std::time::Duration::from_millis(2));
                log.lock().unwrap().push(i);
            }));
        }
        w.wait();
        assert_eq!(*log.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn a_panicking_job_does_not_stop_the_worker() {
        let mut w = BackgroundWorker::default();
        let n = Arc::new(AtomicUsize::new(0));
        w.submit(Box::new(|| panic!("job fails")));
        let m = Arc::clone(&n);
        w.submit(Box::new(move || {
            m.fetch_add(1, Ordering::SeqCst);
        }));
        w.wait();
        assert_eq!(n.load(Ordering::SeqCst), 1);
    }
}
