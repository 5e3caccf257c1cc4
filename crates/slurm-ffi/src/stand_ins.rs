//! Stand-ins for the libslurmfull functions the plugins call, for the plugins' unit tests (a test
//! binary has no Slurm process to resolve the real ones): log lines are recorded in [`LOG`] for tests
//! to read, `slurm_xstrdup` is `strdup` (a test frees what it gets back with [`take`]), and this
//! thread's `slurm_xstrdup`s and `slurm_xfree`s are counted, so a test can tell that every
//! allocation it saw made was freed.
//!
//! Compiled in every build because the plugin crate picks them with its own `cfg(test)` (where its
//! log shims declare Slurm's functions); the plugins' `.so` never calls them, so the linker drops
//! them there. Nothing here knows the callers: the log module and the plugins call these. A
//! benchmark binary, which links a plugin's library built as it ships, gets them as the C symbols
//! that library calls from [`stand_in_symbols!`](crate::stand_in_symbols).

use std::cell::Cell;
use std::ffi::{c_char, c_void, CStr};
use std::sync::Mutex;

/// Every line logged through the stand-ins, as `<level>: <text>`.
pub static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

thread_local! {
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
    static FREED: Cell<usize> = const { Cell::new(0) };
}

/// (strings allocated, strings freed) on this thread so far.
pub fn allocations() -> (usize, usize) {
    (ALLOCATED.get(), FREED.get())
}

/// # Safety
/// `arg` is a valid NUL-terminated string.
unsafe fn record(level: &str, arg: *const c_char) {
    // SAFETY: the caller's promise.
    let text = unsafe { CStr::from_ptr(arg) }.to_string_lossy().into_owned();
    LOG.lock().unwrap_or_else(|p| p.into_inner()).push(format!("{level}: {text}"));
}

/// `slurm_error("%s", arg)`.
///
/// # Safety
/// `arg` is a valid NUL-terminated string.
pub unsafe fn slurm_error(_fmt: *const c_char, arg: *const c_char) {
    // SAFETY: the caller's promise.
    unsafe { record("error", arg) }
}

/// `slurm_info("%s", arg)`.
///
/// # Safety
/// As for [`slurm_error`].
pub unsafe fn slurm_info(_fmt: *const c_char, arg: *const c_char) {
    // SAFETY: the caller's promise.
    unsafe { record("info", arg) }
}

/// `slurm_verbose("%s", arg)`.
///
/// # Safety
/// As for [`slurm_error`].
pub unsafe fn slurm_verbose(_fmt: *const c_char, arg: *const c_char) {
    // SAFETY: the caller's promise.
    unsafe { record("verbose", arg) }
}

/// `slurm_xstrdup`: `strdup`, counted.
///
/// # Safety
/// `s` is a valid NUL-terminated string.
pub unsafe fn slurm_xstrdup(s: *const c_char) -> *mut c_char {
    ALLOCATED.set(ALLOCATED.get() + 1);
    // SAFETY: the caller's promise.
    unsafe { libc::strdup(s) }
}

/// `slurm_xfree(&p)`: frees `p` (counted when not NULL) and sets it to NULL.
///
/// # Safety
/// `p` points to a pointer that is NULL or came from [`slurm_xstrdup`] and is not used after this.
pub unsafe fn slurm_xfree(p: *mut *mut c_void) {
    // SAFETY: the caller's promise: `*p` is readable and NULL or ours to free.
    unsafe {
        if !(*p).is_null() {
            FREED.set(FREED.get() + 1);
        }
        libc::free(*p);
        *p = std::ptr::null_mut();
    }
}

/// Takes the C string a test got back (from [`slurm_xstrdup`]) and frees it.
///
/// # Safety
/// `p` is NULL or came from [`slurm_xstrdup`], and is not used after this.
pub unsafe fn take(p: *mut c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller's promise: a NUL-terminated strdup copy, ours to free.
    unsafe {
        let s = CStr::from_ptr(p).to_string_lossy().into_owned();
        libc::free(p.cast());
        Some(s)
    }
}

/// Defines, in the invoking crate, the libslurmfull functions the plugins call (`slurm_error`,
/// `slurm_info`, `slurm_verbose`, `slurm_xstrdup`, `slurm_xfree`) as C symbols that call the
/// stand-ins above. For a benchmark binary that links a plugin's library: nothing resolves those
/// symbols there, as slurmctld does for the plugin's `.so` (which is not built with them: only the
/// binary that invokes this has them).
///
/// Slurm's log functions are variadic (`slurm_info(const char *fmt, ...)`); the plugins call them
/// with `"%s"` and one string, which the x86-64 and AArch64 Linux calling conventions pass as they
/// pass the two arguments of the functions defined here.
#[macro_export]
macro_rules! stand_in_symbols {
    () => {
        #[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
        compile_error!("slurm_ffi::stand_in_symbols! relies on the x86-64 or AArch64 Linux calling convention");

        /// `slurm_error("%s", arg)`: recorded in `slurm_ffi::stand_ins::LOG`.
        ///
        /// # Safety
        /// `arg` is a valid NUL-terminated string.
        #[no_mangle]
        pub unsafe extern "C" fn slurm_error(fmt: *const ::std::ffi::c_char, arg: *const ::std::ffi::c_char) {
            // SAFETY: the caller's promise.
            unsafe { $crate::stand_ins::slurm_error(fmt, arg) }
        }

        /// `slurm_info("%s", arg)`: recorded in `slurm_ffi::stand_ins::LOG`.
        ///
        /// # Safety
        /// `arg` is a valid NUL-terminated string.
        #[no_mangle]
        pub unsafe extern "C" fn slurm_info(fmt: *const ::std::ffi::c_char, arg: *const ::std::ffi::c_char) {
            // SAFETY: the caller's promise.
            unsafe { $crate::stand_ins::slurm_info(fmt, arg) }
        }

        /// `slurm_verbose("%s", arg)`: recorded in `slurm_ffi::stand_ins::LOG`.
        ///
        /// # Safety
        /// `arg` is a valid NUL-terminated string.
        #[no_mangle]
        pub unsafe extern "C" fn slurm_verbose(fmt: *const ::std::ffi::c_char, arg: *const ::std::ffi::c_char) {
            // SAFETY: the caller's promise.
            unsafe { $crate::stand_ins::slurm_verbose(fmt, arg) }
        }

        /// `slurm_xstrdup`: `strdup`.
        ///
        /// # Safety
        /// `s` is a valid NUL-terminated string.
        #[no_mangle]
        pub unsafe extern "C" fn slurm_xstrdup(s: *const ::std::ffi::c_char) -> *mut ::std::ffi::c_char {
            // SAFETY: the caller's promise.
            unsafe { $crate::stand_ins::slurm_xstrdup(s) }
        }

        /// `slurm_xfree(&p)`: frees `p` and sets it to NULL.
        ///
        /// # Safety
        /// `p` points to a pointer that is NULL or came from `slurm_xstrdup`.
        #[no_mangle]
        pub unsafe extern "C" fn slurm_xfree(p: *mut *mut ::std::ffi::c_void) {
            // SAFETY: the caller's promise.
            unsafe { $crate::stand_ins::slurm_xfree(p) }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_duplicated_is_counted_and_freed() {
        let before = allocations();
        // SAFETY: a literal C string; the copy is freed by slurm_xfree.
        let mut copy = unsafe { slurm_xstrdup(c"x".as_ptr()) };
        unsafe { slurm_xfree((&mut copy as *mut *mut c_char).cast()) };
        assert!(copy.is_null());
        assert_eq!(allocations(), (before.0 + 1, before.1 + 1));
        // SAFETY: as above; `take` frees it.
        assert_eq!(unsafe { take(slurm_xstrdup(c"y".as_ptr())) }.as_deref(), Some("y"));
        assert_eq!(unsafe { take(std::ptr::null_mut()) }, None);
    }
}
