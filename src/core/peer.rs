//! Who is at the other end of a TCP connection that comes from this machine. `SO_PEERCRED` does not
//! apply to TCP, but a connection between two sockets of one network namespace (loopback, or the
//! container's own address) lists the peer's socket in `/proc/net/tcp{,6}` with its owner's uid, which
//! the kernel sets when the socket is made and nobody can change.
//!
//! boxd's listeners use it to refuse the users whose code it does not trust (Chromium's renderers, a
//! training instance's policy code) and, on sandboxd's tokenless listeners, anyone but boxd's own user.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::RangeInclusive;

/// What `/proc/net/tcp*` is read of, at most: a machine with a few thousand sockets lists a few MiB.
const MAX_TABLE_BYTES: u64 = 64 * 1024 * 1024;

/// Who may connect.
#[derive(Clone, Debug)]
pub enum PeerRule {
    /// Every connection but those of these users.
    AllBut(Vec<RangeInclusive<u32>>),
    /// Only connections of processes running as this user; one from another host (its socket is not
    /// in this network namespace) is admitted only when `remote` allows it, and never over loopback.
    OnlyUser { uid: u32, remote: bool },
}

impl PeerRule {
    /// Whether a rule needs the peer's uid at all (an empty refusal list does not).
    pub fn is_open(&self) -> bool {
        matches!(self, PeerRule::AllBut(refused) if refused.is_empty())
    }

    /// Whether the connection from `peer` to `local` is admitted; reads `/proc` (blocking, short).
    pub fn admits(&self, peer: SocketAddr, local: SocketAddr) -> bool {
        if self.is_open() {
            return true;
        }
        let owner = owner_of(peer, local);
        match self {
            PeerRule::AllBut(refused) => match owner {
                Some(uid) => !refused.iter().any(|range| range.contains(&uid)),
                // Gone already, or from another network namespace: no user of this one.
                None => true,
            },
            PeerRule::OnlyUser { uid, remote } => match owner {
                Some(owner) => owner == *uid,
                None => *remote && !is_loopback(peer.ip()),
            },
        }
    }
}

/// The uid owning the socket at `peer` connected to `local`, when that socket is in this network
/// namespace.
pub fn owner_of(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .find_map(|table| owner_in(&read_table(table)?, peer, local))
}

fn read_table(path: &str) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_TABLE_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// The uid column of the line whose local address is `peer` and remote address is `local`.
fn owner_in(table: &str, peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    table.lines().skip(1).find_map(|line| {
        let mut fields = line.split_whitespace();
        let _slot = fields.next()?;
        let from = parse_address(fields.next()?)?;
        let to = parse_address(fields.next()?)?;
        if !same(from, peer) || !same(to, local) {
            return None;
        }
        // state, tx:rx queues, timer, retransmits, then the uid.
        fields.nth(4)?.parse().ok()
    })
}

fn same(listed: SocketAddr, wanted: SocketAddr) -> bool {
    listed.port() == wanted.port() && canonical(listed.ip()) == canonical(wanted.ip())
}

/// IPv4-mapped IPv6 addresses as the IPv4 address they carry.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

fn is_loopback(ip: IpAddr) -> bool {
    canonical(ip).is_loopback()
}

/// `0100007F:1F90` (IPv4: one 32-bit word in the kernel's byte order, which is little-endian here) or
/// 32 hex digits (IPv6: four such words), then the port in hex.
fn parse_address(text: &str) -> Option<SocketAddr> {
    let (address, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip = match address.len() {
        8 => IpAddr::V4(Ipv4Addr::from(
            u32::from_str_radix(address, 16).ok()?.to_le_bytes(),
        )),
        32 => {
            let mut octets = [0u8; 16];
            for (index, chunk) in octets.chunks_exact_mut(4).enumerate() {
                let word = address.get(index * 8..index * 8 + 8)?;
                chunk.copy_from_slice(&u32::from_str_radix(word, 16).ok()?.to_le_bytes());
            }
            IpAddr::from(octets)
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_as_the_kernel_lists_them() {
        assert_eq!(
            parse_address("0100007F:1F90"),
            Some(SocketAddr::from(([127, 0, 0, 1], 8080)))
        );
        assert_eq!(
            parse_address("00000000000000000000000001000000:0050"),
            Some(
                "[::1]:80"
                    .parse()
                    .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)))
            )
        );
        assert_eq!(
            parse_address("0000000000000000FFFF00000100007F:2382").map(|a| canonical(a.ip())),
            Some(IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
    }

    /// A real loopback connection of this process: its owner is this process's user.
    #[test]
    fn a_loopback_connection_is_owned_by_its_user() {
        let Ok(listener) = std::net::TcpListener::bind("127.0.0.1:0") else {
            panic!("listener");
        };
        let Ok(address) = listener.local_addr() else {
            panic!("address");
        };
        let Ok(client) = std::net::TcpStream::connect(address) else {
            panic!("connect");
        };
        let Ok((_server, peer)) = listener.accept() else {
            panic!("accept");
        };
        assert_eq!(client.local_addr().ok(), Some(peer));
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        assert_eq!(owner_of(peer, address), Some(me));
        assert!(
            PeerRule::OnlyUser {
                uid: me,
                remote: false
            }
            .admits(peer, address)
        );
        assert!(
            !PeerRule::OnlyUser {
                uid: me.wrapping_add(1),
                remote: true
            }
            .admits(peer, address)
        );
        assert!(!PeerRule::AllBut(vec![me..=me]).admits(peer, address));
        assert!(PeerRule::AllBut(Vec::new()).admits(peer, address));
    }
}
