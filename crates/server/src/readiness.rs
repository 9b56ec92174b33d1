//! The server's phase (loading, ready, draining), shared by `/ready` and the shutdown path.

use std::sync::atomic::{AtomicU8, Ordering};

/// Where the server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Loading = 0,
    Ready = 1,
    Draining = 2,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Loading => "loading",
            Phase::Ready => "ready",
            Phase::Draining => "draining",
        }
    }
}

/// The phase, shared by the handlers and the shutdown path.
#[derive(Debug)]
pub struct Readiness(AtomicU8);

impl Readiness {
    pub fn new(p: Phase) -> Self {
        Self(AtomicU8::new(p as u8))
    }
    pub fn get(&self) -> Phase {
        match self.0.load(Ordering::Acquire) {
            0 => Phase::Loading,
            1 => Phase::Ready,
            _ => Phase::Draining,
        }
    }
    pub fn set(&self, p: Phase) {
        self.0.store(p as u8, Ordering::Release);
    }
}
