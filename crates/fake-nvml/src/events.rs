//! Event sets. Handles are ids into a registry, so a bad handle is an error, never a bad dereference.

use crate::ret::{Ret, INVALID_ARGUMENT};
use crate::state::State;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// A GPU registered for XID events and how much of its XID log this set has delivered.
struct Registration {
    gpu: u32,
    delivered: usize,
}

#[derive(Default)]
struct Registry {
    next_id: usize,
    sets: HashMap<usize, Vec<Registration>>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    // A panic elsewhere must not make every later call fail.
    let mut guard: MutexGuard<'_, Option<Registry>> = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(Registry::default))
}

pub fn create() -> usize {
    with(|r| {
        r.next_id += 1;
        r.sets.insert(r.next_id, Vec::new());
        r.next_id
    })
}

pub fn free(id: usize) -> Result<(), Ret> {
    with(|r| r.sets.remove(&id).map(drop).ok_or(INVALID_ARGUMENT))
}

/// Registers `gpu`; only XIDs logged from now on are delivered, as with a real driver.
pub fn register(id: usize, gpu: u32, already_logged: usize) -> Result<(), Ret> {
    with(|r| {
        let regs = r.sets.get_mut(&id).ok_or(INVALID_ARGUMENT)?;
        if !regs.iter().any(|reg| reg.gpu == gpu) {
            regs.push(Registration { gpu, delivered: already_logged });
        }
        Ok(())
    })
}

/// The next undelivered (gpu, xid) of this set, marked delivered.
pub fn next(id: usize, state: &State) -> Result<Option<(u32, u64)>, Ret> {
    with(|r| {
        let regs = r.sets.get_mut(&id).ok_or(INVALID_ARGUMENT)?;
        for reg in regs.iter_mut() {
            let Some(gpu) = state.gpus.get(reg.gpu as usize) else { continue };
            if let Some(&xid) = gpu.xids.get(reg.delivered) {
                reg.delivered += 1;
                return Ok(Some((reg.gpu, xid)));
            }
        }
        Ok(None)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivers_only_new_xids_once() {
        let mut st = State::parse("[[gpu]]\nuuid = \"a\"\nname = \"b\"\nxids = [13]\n").unwrap();
        let id = create();
        register(id, 0, st.gpus[0].xids.len()).unwrap();
        assert_eq!(next(id, &st), Ok(None));
        st.gpus[0].xids.extend([79, 48]);
        assert_eq!(next(id, &st), Ok(Some((0, 79))));
        assert_eq!(next(id, &st), Ok(Some((0, 48))));
        assert_eq!(next(id, &st), Ok(None));
        free(id).unwrap();
        assert_eq!(free(id), Err(INVALID_ARGUMENT));
        assert_eq!(next(id, &st), Err(INVALID_ARGUMENT));
    }
}
