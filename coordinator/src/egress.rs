//! The one guard of every outbound call whose target a tenant chooses (webhooks today; package
//! downloads and anything later go through it too).
//!
//! A host is resolved and every address it resolves to is checked: every range of IANA's IPv4
//! and IPv6 special-purpose address registries (loopback, private-use, link-local with cloud
//! metadata, shared address space, documentation, benchmarking, 6to4, Teredo, ...), multicast,
//! and every address of this host's own interfaces whatever its range, are refused, also as the
//! IPv4 address inside an IPv4-mapped, IPv4-compatible or NAT64 IPv6 one, unless a CIDR of
//! `coordinator.egress_allow_cidrs` contains the address. A name with any refused address is
//! refused whole. The HTTP client built here resolves through this guard, so it connects to an
//! address that was checked: there is no second lookup a name could answer differently (DNS
//! rebinding). A URL whose host is an address is checked as it is. Redirects are never
//! followed, and connecting and the whole call are bounded.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use async_trait::async_trait;
use ipnet::IpNet;

/// Why an address may not be reached: the special-purpose range it is in (named as IANA's
/// registries name them), or this host's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Range {
    /// 0.0.0.0/8 but its first address.
    ThisNetwork,
    Unspecified,
    Private,
    SharedAddressSpace,
    Loopback,
    LinkLocal,
    ProtocolAssignments,
    Documentation,
    As112,
    Amt,
    SixToFourRelay,
    Benchmarking,
    Reserved,
    Broadcast,
    Multicast,
    /// 64:ff9b:1::/48; the well-known 64:ff9b::/96 is unwrapped and its IPv4 address checked.
    LocalTranslation,
    Discard,
    DummyPrefix,
    Teredo,
    Orchid,
    SixToFour,
    SegmentRouting,
    UniqueLocal,
    /// ::a.b.c.d whose IPv4 address is itself not refused (the form is deprecated).
    Ipv4Compatible,
    /// An address of one of this host's interfaces.
    HostAddress,
}

impl Range {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Range::ThisNetwork => "this_network",
            Range::Unspecified => "unspecified",
            Range::Private => "private",
            Range::SharedAddressSpace => "carrier_grade_nat",
            Range::Loopback => "loopback",
            Range::LinkLocal => "link_local",
            Range::ProtocolAssignments => "protocol_assignments",
            Range::Documentation => "documentation",
            Range::As112 => "as112",
            Range::Amt => "amt",
            Range::SixToFourRelay => "6to4_relay",
            Range::Benchmarking => "benchmarking",
            Range::Reserved => "reserved",
            Range::Broadcast => "broadcast",
            Range::Multicast => "multicast",
            Range::LocalTranslation => "local_translation",
            Range::Discard => "discard",
            Range::DummyPrefix => "dummy_prefix",
            Range::Teredo => "teredo",
            Range::Orchid => "orchid",
            Range::SixToFour => "6to4",
            Range::SegmentRouting => "segment_routing",
            Range::UniqueLocal => "unique_local",
            Range::Ipv4Compatible => "ipv4_compatible",
            Range::HostAddress => "host_address",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Range::ThisNetwork => "an address of \"this network\" (0.0.0.0/8, RFC 791)",
            Range::Unspecified => "the unspecified address",
            Range::Private => "a private-use address (RFC 1918)",
            Range::SharedAddressSpace => {
                "a shared address space (carrier-grade NAT) address (RFC 6598)"
            }
            Range::Loopback => "a loopback address",
            Range::LinkLocal => "a link-local address (cloud metadata among them)",
            Range::ProtocolAssignments => "an IETF protocol assignments address (RFC 6890)",
            Range::Documentation => "a documentation address (RFC 5737, RFC 3849, RFC 9637)",
            Range::As112 => "an AS112 (DNS sink) address (RFC 7534, RFC 7535)",
            Range::Amt => "an AMT relay anycast address (RFC 7450)",
            Range::SixToFourRelay => "a deprecated 6to4 relay anycast address (RFC 7526)",
            Range::Benchmarking => "a benchmarking address (RFC 2544, RFC 5180)",
            Range::Reserved => "a reserved address (240.0.0.0/4)",
            Range::Broadcast => "the limited broadcast address",
            Range::Multicast => "a multicast address",
            Range::LocalTranslation => "a local-use IPv4/IPv6 translation address (RFC 8215)",
            Range::Discard => "a discard-only address (RFC 6666)",
            Range::DummyPrefix => "a dummy IPv6 prefix address (RFC 9780)",
            Range::Teredo => "a Teredo address (RFC 4380)",
            Range::Orchid => "an ORCHID address (RFC 7343)",
            Range::SixToFour => "a 6to4 address (RFC 3056)",
            Range::SegmentRouting => "a segment routing (SRv6) SID (RFC 9602)",
            Range::UniqueLocal => "a unique-local IPv6 address (RFC 4193)",
            Range::Ipv4Compatible => "a deprecated IPv4-compatible IPv6 address (RFC 4291)",
            Range::HostAddress => "one of this host's own addresses",
        }
    }
}

/// The ranges no tenant's call may reach unless the operator allows them: IANA's IPv4 and IPv6
/// special-purpose address registries whole (globally reachable entries too: nothing a
/// webhook is for lives there), and multicast. The most specific range containing an address
/// names it. ::ffff:0:0/96 and 64:ff9b::/96 are not here: their IPv4 address is checked.
static REFUSED: LazyLock<Vec<(IpNet, Range)>> = LazyLock::new(|| {
    [
        ("0.0.0.0/8", Range::ThisNetwork),
        ("0.0.0.0/32", Range::Unspecified),
        ("10.0.0.0/8", Range::Private),
        ("100.64.0.0/10", Range::SharedAddressSpace),
        ("127.0.0.0/8", Range::Loopback),
        ("169.254.0.0/16", Range::LinkLocal),
        ("172.16.0.0/12", Range::Private),
        ("192.0.0.0/24", Range::ProtocolAssignments),
        ("192.0.2.0/24", Range::Documentation),
        ("192.31.196.0/24", Range::As112),
        ("192.52.193.0/24", Range::Amt),
        ("192.88.99.0/24", Range::SixToFourRelay),
        ("192.168.0.0/16", Range::Private),
        ("192.175.48.0/24", Range::As112),
        ("198.18.0.0/15", Range::Benchmarking),
        ("198.51.100.0/24", Range::Documentation),
        ("203.0.113.0/24", Range::Documentation),
        ("224.0.0.0/4", Range::Multicast),
        ("240.0.0.0/4", Range::Reserved),
        ("255.255.255.255/32", Range::Broadcast),
        ("::/128", Range::Unspecified),
        ("::1/128", Range::Loopback),
        ("64:ff9b:1::/48", Range::LocalTranslation),
        ("100::/64", Range::Discard),
        ("100:0:0:1::/64", Range::DummyPrefix),
        ("2001::/23", Range::ProtocolAssignments),
        ("2001::/32", Range::Teredo),
        ("2001:2::/48", Range::Benchmarking),
        ("2001:3::/32", Range::Amt),
        ("2001:4:112::/48", Range::As112),
        ("2001:10::/28", Range::Orchid),
        ("2001:20::/28", Range::Orchid),
        ("2001:db8::/32", Range::Documentation),
        ("2002::/16", Range::SixToFour),
        ("2620:4f:8000::/48", Range::As112),
        ("3fff::/20", Range::Documentation),
        ("5f00::/16", Range::SegmentRouting),
        ("fc00::/7", Range::UniqueLocal),
        ("fe80::/10", Range::LinkLocal),
        ("ff00::/8", Range::Multicast),
    ]
    .into_iter()
    .map(|(net, range)| (IpNet::from_str(net).expect("a valid CIDR"), range))
    .collect()
});

/// NAT64's well-known prefix (RFC 6052): an IPv4 address inside an IPv6 one.
const NAT64: Ipv6Addr = Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0);

/// How an IPv6 address carries an IPv4 one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Embedding {
    /// ::ffff:a.b.c.d
    Mapped,
    /// ::a.b.c.d (deprecated)
    Compatible,
    /// 64:ff9b::a.b.c.d
    Nat64,
}

impl Embedding {
    fn describe(self) -> &'static str {
        match self {
            Embedding::Mapped => "the IPv4-mapped form",
            Embedding::Compatible => "the deprecated IPv4-compatible form",
            Embedding::Nat64 => "the NAT64 form (64:ff9b::/96)",
        }
    }
}

/// The IPv4 address inside `v6`, and how it is carried.
fn embedded(v6: Ipv6Addr) -> Option<(Embedding, Ipv4Addr)> {
    let s = v6.segments();
    let v4 = || {
        let [a, b] = s[6].to_be_bytes();
        let [c, d] = s[7].to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        Some((Embedding::Mapped, v4))
    } else if s[..6] == NAT64.segments()[..6] {
        Some((Embedding::Nat64, v4()))
    } else if s[..6] == [0; 6] && u32::from(v4()) > 1 {
        // :: and ::1 are their own IPv6 addresses, not IPv4 ones.
        Some((Embedding::Compatible, v4()))
    } else {
        None
    }
}

/// Why an address is refused: its range, and the IPv4 address (and its form) it was judged by
/// when it carries one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub range: Range,
    pub via: Option<(Embedding, Ipv4Addr)>,
}

/// A call the guard refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "{}{}, which coordinator.egress_allow_cidrs does not allow",
        subject(.host, .address),
        what(.refused)
    )]
    Address {
        host: String,
        address: IpAddr,
        refused: Refused,
    },
    #[error("{host} cannot be resolved: {reason}")]
    Unresolved { host: String, reason: String },
}

/// `<address> is ` when the host is the address itself, `<name> resolves to <address>, `.
fn subject(host: &str, address: &IpAddr) -> String {
    if IpAddr::from_str(host).is_ok_and(|h| h == *address) {
        format!("{address} is ")
    } else {
        format!("{host} resolves to {address}, ")
    }
}

fn what(refused: &Refused) -> String {
    match refused.via {
        Some((Embedding::Compatible, v4)) if refused.range == Range::Ipv4Compatible => {
            format!("{} (of {v4})", refused.range.describe())
        }
        Some((form, v4)) => format!("{} of {v4}, {}", form.describe(), refused.range.describe()),
        None => refused.range.describe().to_owned(),
    }
}

impl Refusal {
    /// The metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Address { refused, .. } => refused.range.as_str(),
            Refusal::Unresolved { .. } => "unresolved",
        }
    }
}

/// Name resolution and this host's own addresses, so that tests can make a name resolve to
/// what they choose (and change it between a check and a call) and give the host addresses.
#[async_trait]
pub trait Lookup: Send + Sync + 'static {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<IpAddr>>;

    /// The addresses of this host's interfaces, read at each check (they change).
    fn host_addresses(&self) -> Vec<IpAddr>;
}

/// The operating system's resolver and interfaces.
#[derive(Debug, Default)]
pub struct SystemLookup;

#[async_trait]
impl Lookup for SystemLookup {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<IpAddr>> {
        Ok(tokio::net::lookup_host((host, 0))
            .await?
            .map(|a| a.ip())
            .collect())
    }

    fn host_addresses(&self) -> Vec<IpAddr> {
        match nix::ifaddrs::getifaddrs() {
            Ok(interfaces) => interfaces
                .filter_map(|i| {
                    let address = i.address?;
                    if let Some(v4) = address.as_sockaddr_in() {
                        Some(IpAddr::V4(v4.ip()))
                    } else {
                        address.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
                    }
                })
                .collect(),
            Err(e) => {
                // The special-purpose ranges still hold; the host's public addresses are what
                // this check adds.
                tracing::warn!(error = %e, "cannot list this host's addresses");
                Vec::new()
            }
        }
    }
}

/// The guard; cheap to clone.
#[derive(Clone)]
pub struct Egress {
    allow: Arc<Vec<IpNet>>,
    lookup: Arc<dyn Lookup>,
    refused: prometheus::IntCounterVec,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("allow", &self.allow)
            .finish()
    }
}

impl Egress {
    /// `allow`: `coordinator.egress_allow_cidrs`, comma-separated CIDRs (an address alone is
    /// its own /32 or /128).
    pub fn new(
        allow: &str,
        lookup: Arc<dyn Lookup>,
        refused: prometheus::IntCounterVec,
    ) -> Result<Self, String> {
        let allow = allow
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(|c| {
                IpNet::from_str(c)
                    .or_else(|_| IpAddr::from_str(c).map(IpNet::from))
                    .map_err(|_| format!("coordinator.egress_allow_cidrs: {c:?} is not a CIDR"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            allow: Arc::new(allow),
            lookup,
            refused,
        })
    }

    /// The same guard resolving with `lookup`.
    pub fn with_lookup(mut self, lookup: Arc<dyn Lookup>) -> Self {
        self.lookup = lookup;
        self
    }

    /// Why `address` may not be reached, if it may not.
    pub fn refused_range(&self, address: IpAddr) -> Option<Range> {
        self.refused(address, &self.lookup.host_addresses())
            .map(|r| r.range)
    }

    /// Why `address` may not be reached, if it may not; `host`: this host's own addresses.
    fn refused(&self, address: IpAddr, host: &[IpAddr]) -> Option<Refused> {
        let allowed = |a: IpAddr| self.allow.iter().any(|net| net.contains(&a));
        if allowed(address) {
            return None;
        }
        let via = match address {
            IpAddr::V6(v6) => embedded(v6),
            IpAddr::V4(_) => None,
        };
        // The IPv4 address a v6 one carries is what a connection reaches: judged as itself.
        let judged = via.map_or(address, |(_, v4)| IpAddr::V4(v4));
        if via.is_some() && allowed(judged) {
            return None;
        }
        let range = REFUSED
            .iter()
            .filter(|(net, _)| net.contains(&judged))
            .max_by_key(|(net, _)| net.prefix_len())
            .map(|(_, range)| *range)
            .or_else(|| {
                let own = |a: &IpAddr| *a == judged || *a == address;
                host.iter().any(own).then_some(Range::HostAddress)
            })
            .or_else(|| {
                matches!(via, Some((Embedding::Compatible, _))).then_some(Range::Ipv4Compatible)
            })?;
        Some(Refused { range, via })
    }

    /// Every address `host` may be reached at (`Err` naming the first refused one, or why it
    /// does not resolve). Counted and logged when refused.
    pub async fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, Refusal> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let checked = match IpAddr::from_str(host) {
            Ok(address) => self.check(host, vec![address]),
            Err(_) => match self.lookup.lookup(host).await {
                Ok(addresses) if addresses.is_empty() => Err(Refusal::Unresolved {
                    host: host.to_owned(),
                    reason: "no address".into(),
                }),
                Ok(addresses) => self.check(host, addresses),
                Err(e) => Err(Refusal::Unresolved {
                    host: host.to_owned(),
                    reason: e.to_string(),
                }),
            },
        };
        if let Err(refusal) = &checked {
            self.refused.with_label_values(&[refusal.reason()]).inc();
            tracing::warn!(%host, reason = refusal.reason(), %refusal, "outbound call refused");
        }
        checked
    }

    fn check(&self, host: &str, addresses: Vec<IpAddr>) -> Result<Vec<IpAddr>, Refusal> {
        let own = self.lookup.host_addresses();
        for &address in &addresses {
            if let Some(refused) = self.refused(address, &own) {
                return Err(Refusal::Address {
                    host: host.to_owned(),
                    address,
                    refused,
                });
            }
        }
        Ok(addresses)
    }

    /// Checks the host of `url` (resolving a name): what a submission is checked with.
    pub async fn check_url(&self, url: &url::Url) -> Result<(), Refusal> {
        let host = url.host_str().unwrap_or_default();
        self.resolve(host).await.map(drop)
    }

    /// An HTTP client whose every connection goes through this guard: names resolve here (a
    /// refused one fails the call), no redirect is followed, connecting takes at most
    /// `connect`, a call at most `total`. A URL whose host is an address is not resolved by
    /// the client: check it with [`Egress::check_url`] before the call.
    pub fn client(&self, connect: Duration, total: Duration) -> reqwest::Result<reqwest::Client> {
        reqwest::Client::builder()
            .dns_resolver(Arc::new(Resolver(self.clone())))
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(connect)
            .timeout(total)
            .user_agent(concat!("codegen-cluster/", env!("CARGO_PKG_VERSION")))
            .build()
    }
}

/// The client's resolver: the guard's lookup and check, the port the client asks for.
struct Resolver(Egress);

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let egress = self.0.clone();
        Box::pin(async move {
            let addresses = egress.resolve(name.as_str()).await?;
            let addrs: reqwest::dns::Addrs = Box::new(
                addresses
                    .into_iter()
                    .map(|ip| SocketAddr::new(ip, 0))
                    .collect::<Vec<_>>()
                    .into_iter(),
            );
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests;
