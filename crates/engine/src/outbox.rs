//! Events on their way to the requests' streams, delivered by a thread of their own.
//!
//! Each event wakes the request's HTTP task on the tokio runtime; sent from the engine
//! thread, that wake-up (often a futex call for a parked worker) sat on the step's critical
//! path, inside the `verify_emit` host phase (0.130 ms a step for ~25 sequences, no-spec,
//! concurrency 32 on the H200 host; results/2026-12-02-host-outbox). The engine queues a
//! step's events here and hands them over in one batch after the step; the delivery thread
//! sends them in order, so a request's events keep their order (all of a request's events
//! go through one outbox).

use std::sync::mpsc::{channel, Sender};
use std::thread::JoinHandle;

use tokio::sync::mpsc::UnboundedSender;

use crate::api::EngineEvent;

type Batch = Vec<(UnboundedSender<EngineEvent>, EngineEvent)>;

#[derive(Default)]
pub(crate) struct Outbox {
    pending: Batch,
    thread: Option<(Sender<Batch>, JoinHandle<()>)>,
}

impl Outbox {
    /// Queues `event` for the stream `to` (delivered at the next [`Outbox::flush`]).
    pub fn push(&mut self, to: &UnboundedSender<EngineEvent>, event: EngineEvent) {
        self.pending.push((to.clone(), event));
    }

    /// Hands the queued events to the delivery thread (started at the first batch).
    pub fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.pending);
        let (tx, _) = self.thread.get_or_insert_with(|| {
            let (tx, rx) = channel::<Batch>();
            let handle = std::thread::Builder::new()
                .name("wring-events".into())
                .spawn(move || {
                    for batch in rx {
                        deliver(batch);
                    }
                })
                .expect("spawning the event delivery thread");
            (tx, handle)
        });
        if let Err(e) = tx.send(batch) {
            // The thread is gone (it only exits when the outbox drops it): deliver here.
            deliver(e.0);
        }
    }
}

fn deliver(batch: Batch) {
    for (to, event) in batch {
        // A closed stream (client gone) is noticed by the engine's abort check.
        let _ = to.send(event);
    }
}

impl Drop for Outbox {
    /// Delivers what is queued and waits for the thread, so no event is lost at shutdown.
    fn drop(&mut self) {
        self.flush();
        if let Some((tx, handle)) = self.thread.take() {
            drop(tx);
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::FinishReason;

    fn finished() -> EngineEvent {
        EngineEvent::Finished {
            reason: FinishReason::Stop,
            usage: Default::default(),
        }
    }

    #[test]
    fn events_arrive_in_order_and_only_after_a_flush() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut out = Outbox::default();
        for i in 0..100u32 {
            out.push(
                &tx,
                EngineEvent::Tokens {
                    ids: vec![i],
                    text: i.to_string(),
                    logprobs: None,
                },
            );
            if i % 7 == 0 {
                out.flush();
            }
        }
        out.push(&tx, finished());
        // Not flushed yet: the last batch is still queued.
        drop(out); // flushes and joins the delivery thread
        let mut got = vec![];
        while let Ok(e) = rx.try_recv() {
            got.push(e);
        }
        assert_eq!(got.len(), 101);
        for (i, e) in got[..100].iter().enumerate() {
            match e {
                EngineEvent::Tokens { ids, .. } => assert_eq!(ids, &vec![i as u32]),
                other => panic!("event {i}: {other:?}"),
            }
        }
        assert!(matches!(got[100], EngineEvent::Finished { .. }));
    }

    #[test]
    fn a_closed_stream_does_not_stop_the_others() {
        let (gone, rx_gone) = tokio::sync::mpsc::unbounded_channel();
        drop(rx_gone);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut out = Outbox::default();
        out.push(&gone, finished());
        out.push(&tx, finished());
        drop(out);
        assert!(matches!(rx.try_recv(), Ok(EngineEvent::Finished { .. })));
    }
}
