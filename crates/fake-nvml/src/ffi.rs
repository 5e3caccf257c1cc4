//! The only place that touches raw pointers: NULL checks, writes through out-pointers, handle encoding,
//! the panic boundary every exported function runs inside, and where this library was loaded from.

use crate::ret::{Ret, INSUFFICIENT_SIZE, INVALID_ARGUMENT, SUCCESS, UNKNOWN};
use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlEventSet_t, nvmlGpmSample_t};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::path::PathBuf;

/// glibc's `Dl_info`.
#[repr(C)]
struct DlInfo {
    dli_fname: *const c_char,
    dli_fbase: *mut c_void,
    dli_sname: *const c_char,
    dli_saddr: *mut c_void,
}

extern "C" {
    fn dladdr(addr: *const c_void, info: *mut DlInfo) -> c_int;
}

/// The file this code was loaded from (the .so a process dlopened, or the test binary).
pub fn own_file() -> Option<PathBuf> {
    let mut info = DlInfo {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    let here = own_file as *const c_void;
    // SAFETY: dladdr only reads `here` as an address and fills `info`, which lives across the call.
    if unsafe { dladdr(here, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: non-NULL, and glibc's dli_fname is a NUL-terminated path owned by the loader, valid while
    // the object stays loaded (it is: this code is running); copied out at once.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(PathBuf::from(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name.to_bytes())))
}

/// Runs `body` so that neither a panic nor an error escapes into C: both become an `nvmlReturn_t`.
pub fn boundary(body: impl FnOnce() -> Result<(), Ret>) -> Ret {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => UNKNOWN,
    }
}

/// Writes `value` to `out`.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
pub unsafe fn write<T>(out: *mut T, value: T) -> Result<(), Ret> {
    if out.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: non-NULL, and the caller vouches for the rest.
    unsafe { out.write_unaligned(value) };
    Ok(())
}

/// Reads `*ptr`.
///
/// # Safety
/// `ptr` is NULL or valid for a read of `T`.
pub unsafe fn read<T: Copy>(ptr: *const T) -> Result<T, Ret> {
    if ptr.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: non-NULL, and the caller vouches for the rest.
    Ok(unsafe { ptr.read_unaligned() })
}

/// Copies `items` into the caller's array `buf` of `*len` entries; `*len` becomes `items.len()`.
/// Too small (or NULL with items to give): INSUFFICIENT_SIZE, as NVML's "ask for the count" protocol wants.
///
/// # Safety
/// `len` is NULL or valid for reads and writes; `buf` is NULL or valid for `*len` writes of `T`.
pub unsafe fn fill<T: Copy>(buf: *mut T, len: *mut c_uint, items: &[T]) -> Result<(), Ret> {
    // SAFETY: the caller's contract covers both pointers.
    let room = unsafe { read(len)? } as usize;
    let needed = c_uint::try_from(items.len()).map_err(|_| UNKNOWN)?;
    unsafe { write(len, needed)? };
    if items.len() > room || (buf.is_null() && !items.is_empty()) {
        return Err(INSUFFICIENT_SIZE);
    }
    for (i, item) in items.iter().enumerate() {
        // SAFETY: i < items.len() <= room, and `buf` holds `room` entries.
        unsafe { buf.add(i).write_unaligned(*item) };
    }
    Ok(())
}

/// Copies `s` and a NUL into the caller's buffer of `len` bytes.
///
/// # Safety
/// `buf` is NULL or valid for `len` byte writes.
pub unsafe fn write_str(buf: *mut c_char, len: c_uint, s: &str) -> Result<(), Ret> {
    if buf.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    if s.len() >= len as usize {
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: s.len() + 1 <= len bytes, all inside the caller's buffer.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr().cast::<c_char>(), buf, s.len());
        buf.add(s.len()).write(0);
    }
    Ok(())
}

// Handles are small integers in disguise, never dereferenced; the bases make stray pointers fail to decode.
const DEVICE_BASE: usize = 0x6e76_0000;
const SET_BASE: usize = 0x6e76_8000;
const MIG_BASE: usize = 0x6e77_0000;
const GPM_BASE: usize = 0x6e77_8000;
const SPAN: usize = 0x8000;
/// MIG handles: the GPU's index times this, plus the MIG device's index.
const MIG_PER_GPU: usize = 16;

/// What a device handle names: a whole GPU, or a MIG device (GPU index, MIG index) of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Gpu(u32),
    Mig(u32, u32),
}

pub fn device_handle(index: u32) -> nvmlDevice_t {
    (DEVICE_BASE + index as usize) as nvmlDevice_t
}

pub fn mig_handle(index: u32, slice: u32) -> nvmlDevice_t {
    (MIG_BASE + index as usize * MIG_PER_GPU + slice as usize) as nvmlDevice_t
}

/// The whole GPU a handle names; a MIG device's handle is not one (most queries NVML refuses on
/// a MIG device: NOT_SUPPORTED).
pub fn device_index(handle: nvmlDevice_t) -> Result<u32, Ret> {
    match device(handle)? {
        Device::Gpu(index) => Ok(index),
        Device::Mig(..) => Err(crate::ret::NOT_SUPPORTED),
    }
}

pub fn device(handle: nvmlDevice_t) -> Result<Device, Ret> {
    let to_u32 = |i: usize| u32::try_from(i).map_err(|_| INVALID_ARGUMENT);
    if let Ok(i) = decode(handle as usize, MIG_BASE) {
        return Ok(Device::Mig(to_u32(i / MIG_PER_GPU)?, to_u32(i % MIG_PER_GPU)?));
    }
    decode(handle as usize, DEVICE_BASE).and_then(to_u32).map(Device::Gpu)
}

pub fn gpm_handle(slot: usize) -> Result<nvmlGpmSample_t, Ret> {
    if slot >= SPAN {
        return Err(UNKNOWN);
    }
    Ok((GPM_BASE + slot) as nvmlGpmSample_t)
}

pub fn gpm_slot(handle: nvmlGpmSample_t) -> Result<usize, Ret> {
    decode(handle as usize, GPM_BASE)
}

pub fn set_handle(id: usize) -> Result<nvmlEventSet_t, Ret> {
    if id >= SPAN {
        return Err(UNKNOWN);
    }
    Ok((SET_BASE + id) as nvmlEventSet_t)
}

pub fn set_id(handle: nvmlEventSet_t) -> Result<usize, Ret> {
    decode(handle as usize, SET_BASE)
}

fn decode(raw: usize, base: usize) -> Result<usize, Ret> {
    raw.checked_sub(base).filter(|i| *i < SPAN).ok_or(INVALID_ARGUMENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_reject_strays() {
        assert_eq!(device_index(device_handle(7)), Ok(7));
        assert_eq!(device(mig_handle(3, 6)), Ok(Device::Mig(3, 6)));
        assert_eq!(device_index(mig_handle(3, 6)), Err(crate::ret::NOT_SUPPORTED));
        assert_eq!(device_index(std::ptr::null_mut()), Err(INVALID_ARGUMENT));
        assert_eq!(set_id(set_handle(3).unwrap()), Ok(3));
        assert_eq!(set_id(device_handle(1).cast()), Err(INVALID_ARGUMENT));
    }

    #[test]
    fn fill_follows_the_count_protocol() {
        let mut len: c_uint = 0;
        assert_eq!(unsafe { fill(std::ptr::null_mut(), &mut len, &[1u32, 2]) }, Err(INSUFFICIENT_SIZE));
        assert_eq!(len, 2);
        let mut buf = [0u32; 4];
        len = 4;
        assert_eq!(unsafe { fill(buf.as_mut_ptr(), &mut len, &[1u32, 2]) }, Ok(()));
        assert_eq!((len, buf), (2, [1, 2, 0, 0]));
    }

    #[test]
    fn strings_need_room_for_the_nul() {
        let mut buf = [1 as c_char; 4];
        assert_eq!(unsafe { write_str(buf.as_mut_ptr(), 4, "abcd") }, Err(INSUFFICIENT_SIZE));
        assert_eq!(unsafe { write_str(buf.as_mut_ptr(), 4, "abc") }, Ok(()));
        assert_eq!(buf[3], 0);
    }

    #[test]
    fn panics_become_unknown() {
        assert_eq!(boundary(|| panic!("boom")), UNKNOWN);
        assert_eq!(boundary(|| Err(INVALID_ARGUMENT)), INVALID_ARGUMENT);
    }
}
