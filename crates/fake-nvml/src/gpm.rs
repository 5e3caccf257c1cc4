//! GPM samples (Hopper's GPU Performance Monitoring): each sample says which GPU, or which GPU
//! instance (MIG) of it, it was taken of; the metrics between two samples of the same one are the
//! state file's figures for it.

use crate::ret::{Ret, INVALID_ARGUMENT};
use std::sync::{Mutex, PoisonError};

/// What a filled sample was taken of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    pub gpu: u32,
    /// The GPU instance (MIG); None: the whole GPU.
    pub instance: Option<u32>,
}

/// Allocated samples by slot: `Some(None)` allocated, not yet filled; `None` free.
static SAMPLES: Mutex<Vec<Option<Option<Taken>>>> = Mutex::new(Vec::new());

fn samples() -> std::sync::MutexGuard<'static, Vec<Option<Option<Taken>>>> {
    SAMPLES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A new, empty sample's slot.
pub fn alloc() -> usize {
    let mut all = samples();
    match all.iter().position(Option::is_none) {
        Some(free) => {
            all[free] = Some(None);
            free
        }
        None => {
            all.push(Some(None));
            all.len() - 1
        }
    }
}

pub fn free(slot: usize) -> Result<(), Ret> {
    let mut all = samples();
    let entry = all.get_mut(slot).filter(|e| e.is_some()).ok_or(INVALID_ARGUMENT)?;
    *entry = None;
    Ok(())
}

pub fn fill(slot: usize, taken: Taken) -> Result<(), Ret> {
    let mut all = samples();
    let entry = all.get_mut(slot).and_then(Option::as_mut).ok_or(INVALID_ARGUMENT)?;
    *entry = Some(taken);
    Ok(())
}

/// What both samples were taken of: the same GPU or GPU instance, else INVALID_ARGUMENT.
pub fn pair(first: usize, second: usize) -> Result<Taken, Ret> {
    let all = samples();
    let taken = |slot: usize| all.get(slot).copied().flatten().flatten().ok_or(INVALID_ARGUMENT);
    let (a, b) = (taken(first)?, taken(second)?);
    if a != b {
        return Err(INVALID_ARGUMENT);
    }
    Ok(a)
}

/// How many samples are allocated (tests: none leak).
pub fn allocated() -> usize {
    samples().iter().filter(|e| e.is_some()).count()
}
