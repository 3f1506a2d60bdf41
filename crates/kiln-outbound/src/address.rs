//! Which class an IP address belongs to, and so whether a client may make the server
//! reach it. IPv6 forms that carry an IPv4 address (mapped, compatible, NAT64, 6to4)
//! are classed by that address: `::ffff:127.0.0.1` is loopback.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The class of an address; every class but [`AddressClass::Public`] is denied unless
/// an exception allows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddressClass {
    Public,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// `10/8`, `172.16/12`, `192.168/16`, IPv6 unique local `fc00::/7`.
    Private,
    /// `100.64.0.0/10`, shared address space behind a provider's NAT.
    SharedNat,
    /// `169.254/16`, `fe80::/10`.
    LinkLocal,
    /// The cloud instance-metadata endpoints (`169.254.169.254`, `169.254.170.2`,
    /// `fd00:ec2::254`), which hand out credentials.
    Metadata,
    /// `224/4`, `ff00::/8`.
    Multicast,
    /// `0.0.0.0/8`, `::` ("this host": reaches local services on most systems).
    Unspecified,
    /// `240/4` and the broadcast address, `192.0.0.0/24`, benchmarking `198.18/15`.
    Reserved,
}

impl AddressClass {
    pub fn is_public(self) -> bool {
        self == Self::Public
    }
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Public => "public",
            Self::Loopback => "loopback",
            Self::Private => "private-network",
            Self::SharedNat => "shared (carrier-grade NAT)",
            Self::LinkLocal => "link-local",
            Self::Metadata => "cloud metadata",
            Self::Multicast => "multicast",
            Self::Unspecified => "unspecified",
            Self::Reserved => "reserved",
        })
    }
}

/// The class of `ip`.
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => classify_v4(v4),
            None => classify_v6(v6),
        },
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let [a, b, c, d] = ip.octets();
    match (a, b, c, d) {
        (169, 254, 169, 254) | (169, 254, 170, 2) => AddressClass::Metadata,
        (0, ..) => AddressClass::Unspecified,
        (127, ..) => AddressClass::Loopback,
        (10, ..) | (192, 168, ..) => AddressClass::Private,
        (172, 16..=31, ..) => AddressClass::Private,
        (100, 64..=127, ..) => AddressClass::SharedNat,
        (169, 254, ..) => AddressClass::LinkLocal,
        (224..=239, ..) => AddressClass::Multicast,
        (240..=255, ..) | (192, 0, 0, _) | (198, 18..=19, ..) => AddressClass::Reserved,
        _ => AddressClass::Public,
    }
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    let s = ip.segments();
    if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        AddressClass::Metadata
    } else if ip.is_unspecified() {
        AddressClass::Unspecified
    } else if ip.is_loopback() {
        AddressClass::Loopback
    } else if s[0] & 0xfe00 == 0xfc00 {
        AddressClass::Private
    } else if s[0] & 0xffc0 == 0xfe80 {
        AddressClass::LinkLocal
    } else if s[0] & 0xff00 == 0xff00 {
        AddressClass::Multicast
    } else {
        AddressClass::Public
    }
}

/// The IPv4 address an IPv6 one carries: mapped `::ffff:a.b.c.d`, compatible
/// `::a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`, 6to4 `2002:aabb:ccdd::`.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, ..] => Some(tail),
        // `::` and `::1` are IPv6's own unspecified and loopback addresses.
        [0, 0, 0, 0, 0, 0, hi, _] if hi != 0 => Some(tail),
        [0x64, 0xff9b, 0, 0, 0, 0, ..] => Some(tail),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(s: &str) -> AddressClass {
        classify(s.parse().expect("an address"))
    }

    #[test]
    fn every_class_is_recognised() {
        use AddressClass::*;
        let cases = [
            ("127.0.0.1", Loopback),
            ("127.255.0.9", Loopback),
            ("::1", Loopback),
            ("::ffff:127.0.0.1", Loopback),
            ("::127.0.0.1", Loopback),
            ("64:ff9b::7f00:1", Loopback),
            ("2002:7f00:1::", Loopback),
            ("10.0.0.5", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("192.168.1.1", Private),
            ("fd12:3456::1", Private),
            ("::ffff:10.1.2.3", Private),
            ("100.64.0.1", SharedNat),
            ("169.254.1.1", LinkLocal),
            ("fe80::1", LinkLocal),
            ("169.254.169.254", Metadata),
            ("169.254.170.2", Metadata),
            ("fd00:ec2::254", Metadata),
            ("::ffff:169.254.169.254", Metadata),
            ("224.0.0.1", Multicast),
            ("ff02::1", Multicast),
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Unspecified),
            ("::", Unspecified),
            ("255.255.255.255", Reserved),
            ("240.0.0.1", Reserved),
            ("8.8.8.8", Public),
            ("172.32.0.1", Public),
            ("100.128.0.1", Public),
            ("2606:4700::1111", Public),
            ("::ffff:1.1.1.1", Public),
        ];
        for (addr, want) in cases {
            assert_eq!(class(addr), want, "{addr}");
        }
    }
}
