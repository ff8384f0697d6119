//! The one guard of every outbound call whose target a tenant chooses (webhooks today; package
//! downloads and anything later go through it too).
//!
//! A host is resolved and every address it resolves to is checked: loopback, private
//! (RFC 1918), link-local (cloud metadata at 169.254.169.254 among them), carrier-grade NAT,
//! unique-local, multicast, unspecified, broadcast and reserved addresses are refused, in their
//! IPv4-mapped and NAT64 forms too, unless a CIDR of `coordinator.egress_allow_cidrs` contains
//! the address. A name with any refused address is refused whole. The HTTP client built here
//! resolves through this guard, so it connects to an address that was checked: there is no
//! second lookup a name could answer differently (DNS rebinding). A URL whose host is an
//! address is checked as it is. Redirects are never followed, and connecting and the whole call
//! are bounded.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use async_trait::async_trait;
use ipnet::IpNet;

/// Why an address may not be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Range {
    Loopback,
    Private,
    LinkLocal,
    SharedAddressSpace,
    UniqueLocal,
    Multicast,
    Unspecified,
    Broadcast,
    Reserved,
}

impl Range {
    pub fn as_str(self) -> &'static str {
        match self {
            Range::Loopback => "loopback",
            Range::Private => "private",
            Range::LinkLocal => "link_local",
            Range::SharedAddressSpace => "carrier_grade_nat",
            Range::UniqueLocal => "unique_local",
            Range::Multicast => "multicast",
            Range::Unspecified => "unspecified",
            Range::Broadcast => "broadcast",
            Range::Reserved => "reserved",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Range::Loopback => "a loopback address",
            Range::Private => "a private address (RFC 1918)",
            Range::LinkLocal => "a link-local address (cloud metadata among them)",
            Range::SharedAddressSpace => "a carrier-grade NAT address (RFC 6598)",
            Range::UniqueLocal => "a unique-local IPv6 address",
            Range::Multicast => "a multicast address",
            Range::Unspecified => "an unspecified address",
            Range::Broadcast => "the broadcast address",
            Range::Reserved => "a reserved address",
        }
    }
}

/// The ranges no tenant's call may reach unless the operator allows them.
static REFUSED: LazyLock<Vec<(IpNet, Range)>> = LazyLock::new(|| {
    [
        ("0.0.0.0/8", Range::Unspecified),
        ("10.0.0.0/8", Range::Private),
        ("100.64.0.0/10", Range::SharedAddressSpace),
        ("127.0.0.0/8", Range::Loopback),
        ("169.254.0.0/16", Range::LinkLocal),
        ("172.16.0.0/12", Range::Private),
        ("192.0.0.0/24", Range::Reserved),
        ("192.168.0.0/16", Range::Private),
        ("198.18.0.0/15", Range::Reserved),
        ("224.0.0.0/4", Range::Multicast),
        ("255.255.255.255/32", Range::Broadcast),
        ("240.0.0.0/4", Range::Reserved),
        ("::/128", Range::Unspecified),
        ("::1/128", Range::Loopback),
        ("fe80::/10", Range::LinkLocal),
        ("fc00::/7", Range::UniqueLocal),
        ("ff00::/8", Range::Multicast),
    ]
    .into_iter()
    .map(|(net, range)| (IpNet::from_str(net).expect("a valid CIDR"), range))
    .collect()
});

/// NAT64's well-known prefix: an IPv4 address inside an IPv6 one.
const NAT64: Ipv6Addr = Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0);

/// A call the guard refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "{host} is {}{}, which coordinator.egress_allow_cidrs does not allow",
        .range.describe(),
        resolved(.host, .address)
    )]
    Address {
        host: String,
        address: IpAddr,
        range: Range,
    },
    #[error("{host} cannot be resolved: {reason}")]
    Unresolved { host: String, reason: String },
}

fn resolved(host: &str, address: &IpAddr) -> String {
    if host == address.to_string() {
        String::new()
    } else {
        format!(" (it resolves to {address})")
    }
}

impl Refusal {
    /// The metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Address { range, .. } => range.as_str(),
            Refusal::Unresolved { .. } => "unresolved",
        }
    }
}

/// Name resolution, so that tests can make a name resolve to what they choose (and change it
/// between a check and a call).
#[async_trait]
pub trait Lookup: Send + Sync + 'static {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<IpAddr>>;
}

/// The operating system's resolver.
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
        if self.allow.iter().any(|net| net.contains(&address)) {
            return None;
        }
        let embedded = match address {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().or_else(|| nat64(v6)),
            IpAddr::V4(_) => None,
        };
        if let Some(v4) = embedded {
            return self.refused_range(IpAddr::V4(v4));
        }
        REFUSED
            .iter()
            .find(|(net, _)| net.contains(&address))
            .map(|(_, range)| *range)
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
        for &address in &addresses {
            if let Some(range) = self.refused_range(address) {
                return Err(Refusal::Address {
                    host: host.to_owned(),
                    address,
                    range,
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

fn nat64(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    (s[..6] == NAT64.segments()[..6]).then(|| {
        let [a, b] = s[6].to_be_bytes();
        let [c, d] = s[7].to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    })
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
