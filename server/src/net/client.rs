//! Who a request comes from, for per-client limits: its address, with an IPv6 address cut to
//! its /64 (one subscriber's allocation, which a client can otherwise rotate through freely)
//! and an IPv4-mapped IPv6 address read as the IPv4 one.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use axum::http::HeaderMap;

/// The key per-client limits count under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientKey(pub IpAddr);

impl ClientKey {
    /// Requests whose peer is not known (an in-process test router) share this key.
    pub const UNKNOWN: ClientKey = ClientKey(IpAddr::V6(Ipv6Addr::UNSPECIFIED));

    pub fn of(ip: IpAddr) -> ClientKey {
        match ip {
            IpAddr::V4(_) => ClientKey(ip),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => ClientKey(IpAddr::V4(v4)),
                None => {
                    let s = v6.segments();
                    ClientKey(IpAddr::V6(Ipv6Addr::new(
                        s[0], s[1], s[2], s[3], 0, 0, 0, 0,
                    )))
                }
            },
        }
    }

    /// The client of a request: the peer address, or — only when the operator names a header
    /// set by a proxy they run (`--client-address-header`) — the last address in that header
    /// (the one the proxy itself appended; earlier entries are the client's to forge). A
    /// header that is missing or unreadable falls back to the peer address.
    pub fn from_request(
        peer: Option<SocketAddr>,
        headers: &HeaderMap,
        trusted_header: Option<&str>,
    ) -> ClientKey {
        let forwarded = trusted_header
            .and_then(|h| headers.get_all(h).iter().next_back())
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit(',').next())
            .and_then(|a| a.trim().parse::<IpAddr>().ok());
        match (forwarded, peer) {
            (Some(ip), _) => ClientKey::of(ip),
            (None, Some(p)) => ClientKey::of(p.ip()),
            (None, None) => ClientKey::UNKNOWN,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_clients_are_their_slash_64_and_mapped_ipv4_is_ipv4() {
        let a = ClientKey::of("2001:db8:1:2:aaaa::1".parse().unwrap());
        let b = ClientKey::of("2001:db8:1:2:ffff:1:2:3".parse().unwrap());
        let c = ClientKey::of("2001:db8:1:3::1".parse().unwrap());
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(
            ClientKey::of("::ffff:10.0.0.7".parse().unwrap()),
            ClientKey::of("10.0.0.7".parse().unwrap())
        );
    }

    #[test]
    fn only_the_named_header_and_only_its_last_entry_count() {
        let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "6.6.6.6, 10.1.2.3".parse().unwrap());
        let own = ClientKey::of(peer.ip());
        assert_eq!(ClientKey::from_request(Some(peer), &h, None), own);
        assert_eq!(
            ClientKey::from_request(Some(peer), &h, Some("x-forwarded-for")),
            ClientKey::of("10.1.2.3".parse().unwrap())
        );
        h.insert("x-forwarded-for", "not an address".parse().unwrap());
        assert_eq!(
            ClientKey::from_request(Some(peer), &h, Some("x-forwarded-for")),
            own
        );
        assert_eq!(
            ClientKey::from_request(None, &HeaderMap::new(), None),
            ClientKey::UNKNOWN
        );
    }
}
