//! Who listens on a TCP address: read from /proc (the kernel's socket tables, then each process's
//! descriptors), so that "address already in use" can name the process in the way. Best effort: a
//! process of another user is found only when running as root.

use std::net::{IpAddr, SocketAddr};

use super::DaemonError;

/// Binds a listening TCP socket (non-blocking, for tokio) on `addr`; an address in use is refused
/// naming the process that listens there. `what` names the setting, e.g. "http" or "agent.listen".
pub fn bind_tcp(addr: SocketAddr, what: &str) -> Result<std::net::TcpListener, DaemonError> {
    match std::net::TcpListener::bind(addr) {
        Ok(tcp) => {
            tcp.set_nonblocking(true)
                .map_err(|e| DaemonError::Failed(format!("cannot listen on {what} {addr}: {e}")))?;
            Ok(tcp)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            let holder = match listener_of(addr) {
                Some((pid, cmdline)) => format!("pid {pid}: {cmdline}"),
                None => "another process".to_string(),
            };
            Err(DaemonError::Refused(format!(
                "cannot listen on {what} {addr}: the address is in use ({holder}); stop that process or \
                 choose another address"
            )))
        }
        Err(e) => Err(DaemonError::Failed(format!("cannot listen on {what} {addr}: {e}"))),
    }
}

/// The PID and command line of the process listening on `addr`, when it can be found.
pub fn listener_of(addr: SocketAddr) -> Option<(u32, String)> {
    let inode = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .find_map(|text| listening_inode(&text, addr))?;
    let target = format!("socket:[{inode}]");
    for process in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = process.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(fds) = std::fs::read_dir(process.path().join("fd")) else { continue };
        if fds.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|link| link.as_os_str() == target.as_str())) {
            let cmdline = std::fs::read(process.path().join("cmdline")).unwrap_or_default();
            let words: Vec<String> = cmdline
                .split(|&b| b == 0)
                .filter(|w| !w.is_empty())
                .map(|w| String::from_utf8_lossy(w).into())
                .collect();
            return Some((pid, words.join(" ")));
        }
    }
    None
}

/// The inode of the socket in LISTEN state on `addr` (or on the wildcard address of its port) in
/// one of /proc/net/tcp{,6}'s tables.
fn listening_inode(table: &str, addr: SocketAddr) -> Option<u64> {
    const LISTEN: &str = "0A";
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (local, state, inode) = (fields.get(1)?, fields.get(3)?, fields.get(9)?);
        if *state != LISTEN {
            return None;
        }
        let (ip, port) = local.split_once(':')?;
        if u16::from_str_radix(port, 16).ok()? != addr.port() {
            return None;
        }
        let ip = parse_ip(ip)?;
        (ip == addr.ip() || ip.is_unspecified() || addr.ip().is_unspecified()).then(|| inode.parse().ok())?
    })
}

/// An address as /proc/net/tcp writes it: 32-bit words as the host (little-endian) holds them, in hex.
fn parse_ip(hex: &str) -> Option<IpAddr> {
    let mut bytes = Vec::with_capacity(16);
    for i in 0..hex.len() / 8 {
        bytes.extend(u32::from_str_radix(hex.get(i * 8..i * 8 + 8)?, 16).ok()?.to_le_bytes());
    }
    match bytes.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?)).map(|ip| match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:2651 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:2652 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0000000000000000 20 4 30 10 -1
   2: 00000000:2653 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4444 1 0000000000000000 100 0 0 10 0";

    #[test]
    fn finds_the_listener_of_an_address_or_of_its_port_on_every_address() {
        let at = |s: &str| listening_inode(TABLE, s.parse().unwrap());
        assert_eq!(at("127.0.0.1:9809"), Some(4242));
        assert_eq!(at("127.0.0.2:9809"), None, "another address");
        assert_eq!(at("127.0.0.1:9810"), None, "an established connection, not a listener");
        assert_eq!(at("10.1.2.3:9811"), Some(4444), "bound to every address");
    }

    #[test]
    fn reads_both_address_forms() {
        assert_eq!(parse_ip("0100007F"), Some("127.0.0.1".parse().unwrap()));
        assert_eq!(parse_ip("00000000000000000000000001000000"), Some("::1".parse().unwrap()));
        assert_eq!(parse_ip("0000000000000000FFFF00000100007F"), Some("127.0.0.1".parse().unwrap()));
        assert_eq!(parse_ip("xyz"), None);
    }

    #[test]
    fn names_this_process_listening() {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (pid, _) = listener_of(tcp.local_addr().unwrap()).expect("found");
        assert_eq!(pid, std::process::id());
    }
}
