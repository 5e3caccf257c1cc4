//! MUNGE credentials through libmunge, the way Slurm authenticates its own daemons: the node's munged
//! vouches for the uid that encoded a credential, its origin address and the payload; accountd's
//! munged refuses credentials that are expired or already decoded once (replays). All of accountd's
//! `unsafe` is in this module.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::net::Ipv4Addr;
use std::path::Path;

#[allow(non_camel_case_types, non_upper_case_globals, dead_code)]
mod bindings {
    include!(concat!(env!("OUT_DIR"), "/munge_bindings.rs"));
}

use bindings::*;

/// A decoded credential: who encoded it, where, when, and what it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub uid: u32,
    pub gid: u32,
    /// The encoding host's address as its munged knows it; None when munged could not tell (0.0.0.0).
    pub origin: Option<Ipv4Addr>,
    /// Unix time the credential was encoded.
    pub encoded_at: i64,
    pub payload: Vec<u8>,
}

/// Why MUNGE said no.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MungeErrorKind {
    /// munged could not be reached (a problem on this host, not the caller's).
    Unavailable,
    Expired,
    Replayed,
    /// Not a credential, another cluster's key, a bad cipher or MAC, rewound clock ...
    Invalid,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MUNGE: {message}")]
pub struct MungeError {
    pub kind: MungeErrorKind,
    pub message: String,
}

/// A context that is destroyed however the call ends.
struct Context(munge_ctx_t);

impl Context {
    fn new(socket: Option<&Path>) -> Result<Context, MungeError> {
        // SAFETY: munge_ctx_create has no preconditions; NULL means out of memory.
        let ctx = unsafe { munge_ctx_create() };
        if ctx.is_null() {
            return Err(MungeError { kind: MungeErrorKind::Unavailable, message: "cannot create a context".into() });
        }
        let context = Context(ctx);
        if let Some(socket) = socket {
            let path = CString::new(socket.as_os_str().as_encoded_bytes()).map_err(|_| MungeError {
                kind: MungeErrorKind::Unavailable,
                message: format!("socket path {} contains a NUL byte", socket.display()),
            })?;
            // SAFETY: the context is live; MUNGE_OPT_SOCKET takes a C string, which munge copies.
            let err = unsafe { munge_ctx_set(context.0, MUNGE_OPT_SOCKET as c_int, path.as_ptr()) };
            context.check(err)?;
        }
        Ok(context)
    }

    fn check(&self, err: munge_err_t) -> Result<(), MungeError> {
        if err == EMUNGE_SUCCESS {
            return Ok(());
        }
        // SAFETY: the context is live; the message (or NULL) stays valid until the context is destroyed,
        // and it is copied here.
        let text = unsafe { text(munge_ctx_strerror(self.0)) }.or_else(|| unsafe { text(munge_strerror(err)) });
        Err(MungeError { kind: kind(err), message: text.unwrap_or_else(|| format!("error {err}")) })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: created by munge_ctx_create and destroyed once.
        unsafe { munge_ctx_destroy(self.0) }
    }
}

fn kind(err: munge_err_t) -> MungeErrorKind {
    match err {
        EMUNGE_SOCKET | EMUNGE_TIMEOUT | EMUNGE_NO_MEMORY | EMUNGE_SNAFU => MungeErrorKind::Unavailable,
        EMUNGE_CRED_EXPIRED => MungeErrorKind::Expired,
        EMUNGE_CRED_REPLAYED => MungeErrorKind::Replayed,
        _ => MungeErrorKind::Invalid,
    }
}

/// A C string owned by libmunge, copied.
unsafe fn text(p: *const c_char) -> Option<String> {
    (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
}

/// A credential for `payload` from this host's munged (or the one at `socket`), valid for munged's
/// default time-to-live (5 minutes).
pub fn encode(payload: &[u8], socket: Option<&Path>) -> Result<String, MungeError> {
    let context = Context::new(socket)?;
    let mut cred: *mut c_char = std::ptr::null_mut();
    let len = c_int::try_from(payload.len()).map_err(|_| MungeError {
        kind: MungeErrorKind::Invalid,
        message: format!("payload of {} bytes is too large", payload.len()),
    })?;
    // SAFETY: `cred` receives a malloc'd C string (freed below); the payload is read, not kept.
    let err = unsafe { munge_encode(&mut cred, context.0, payload.as_ptr() as *const c_void, len) };
    context.check(err)?;
    // SAFETY: on success `cred` is a NUL-terminated string malloc'd by libmunge.
    let text = unsafe { text(cred) }.unwrap_or_default();
    unsafe { nix::libc::free(cred as *mut c_void) };
    Ok(text)
}

/// Decodes `cred` with this host's munged (or the one at `socket`): an error for anything munged
/// does not vouch for, including an expired or replayed credential.
pub fn decode(cred: &str, socket: Option<&Path>) -> Result<Credential, MungeError> {
    let cred = CString::new(cred.trim())
        .map_err(|_| MungeError { kind: MungeErrorKind::Invalid, message: "credential contains a NUL byte".into() })?;
    let context = Context::new(socket)?;
    let mut payload: *mut c_void = std::ptr::null_mut();
    let mut len: c_int = 0;
    let (mut uid, mut gid): (nix::libc::uid_t, nix::libc::gid_t) = (0, 0);
    // SAFETY: every out-pointer is valid; libmunge may allocate `payload` even when it fails.
    let err = unsafe { munge_decode(cred.as_ptr(), context.0, &mut payload, &mut len, &mut uid, &mut gid) };
    let bytes = if payload.is_null() {
        Vec::new()
    } else {
        // SAFETY: `payload` holds `len` bytes malloc'd by libmunge; copied, then freed once.
        let copy = unsafe { std::slice::from_raw_parts(payload as *const u8, len.max(0) as usize) }.to_vec();
        unsafe { nix::libc::free(payload) };
        copy
    };
    context.check(err)?;
    // `struct in_addr` is one u32 in network byte order.
    let mut addr: u32 = 0;
    let mut encoded_at: nix::libc::time_t = 0;
    // SAFETY: MUNGE_OPT_ADDR4 writes a struct in_addr, MUNGE_OPT_ENCODE_TIME a time_t.
    context.check(unsafe { munge_ctx_get(context.0, MUNGE_OPT_ADDR4 as c_int, &mut addr as *mut u32) })?;
    context.check(unsafe {
        munge_ctx_get(context.0, MUNGE_OPT_ENCODE_TIME as c_int, &mut encoded_at as *mut nix::libc::time_t)
    })?;
    let origin = Ipv4Addr::from(addr.to_ne_bytes());
    Ok(Credential { uid, gid, origin: (!origin.is_unspecified()).then_some(origin), encoded_at, payload: bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[ignore = "needs munged: tests/cluster/up.sh"]
    fn round_trip_then_replay_is_refused() {
        let cred = encode(b"hello", None).unwrap();
        let got = decode(&cred, None).unwrap();
        assert_eq!(got.payload, b"hello");
        assert_eq!(got.uid, nix::unistd::getuid().as_raw());
        assert!((got.encoded_at - chrono::Utc::now().timestamp()).abs() < 60);
        let again = decode(&cred, None).unwrap_err();
        assert_eq!(again.kind, MungeErrorKind::Replayed, "{again}");
    }

    #[test]
    #[ignore = "needs munged: tests/cluster/up.sh"]
    fn garbage_is_invalid() {
        let err = decode("MUNGE:AAAAnot-a-credential:", None).unwrap_err();
        assert_eq!(err.kind, MungeErrorKind::Invalid, "{err}");
        let err = decode("a\0b", None).unwrap_err();
        assert_eq!(err.kind, MungeErrorKind::Invalid);
    }

    #[test]
    fn no_munged_is_unavailable() {
        let err = encode(b"x", Some(Path::new("/nonexistent/munge.socket"))).unwrap_err();
        assert_eq!(err.kind, MungeErrorKind::Unavailable, "{err}");
    }
}
