use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::testing::Names;

fn counter() -> prometheus::IntCounterVec {
    prometheus::IntCounterVec::new(
        prometheus::Opts::new("codegen_egress_refused_total", "test"),
        &["reason"],
    )
    .unwrap()
}

fn guard(allow: &str, names: Arc<Names>) -> Egress {
    Egress::new(allow, names, counter()).unwrap()
}

#[test]
fn every_special_purpose_range_is_refused_in_every_form_and_public_addresses_pass() {
    let egress = guard("", Arc::default());
    for (address, range) in [
        ("127.0.0.1", Range::Loopback),
        ("127.8.9.10", Range::Loopback),
        ("::1", Range::Loopback),
        ("10.0.0.5", Range::Private),
        ("172.16.0.1", Range::Private),
        ("172.31.255.255", Range::Private),
        ("192.168.1.1", Range::Private),
        ("169.254.169.254", Range::LinkLocal),
        ("fe80::1", Range::LinkLocal),
        ("100.64.0.1", Range::SharedAddressSpace),
        ("100.127.255.254", Range::SharedAddressSpace),
        ("fc00::1", Range::UniqueLocal),
        ("fd12:3456::1", Range::UniqueLocal),
        ("224.0.0.1", Range::Multicast),
        ("ff02::1", Range::Multicast),
        ("0.0.0.0", Range::Unspecified),
        ("0.1.2.3", Range::ThisNetwork),
        ("::", Range::Unspecified),
        ("255.255.255.255", Range::Broadcast),
        ("240.0.0.1", Range::Reserved),
        // IANA's registries, the rest of them.
        ("192.0.0.9", Range::ProtocolAssignments),
        ("192.0.0.170", Range::ProtocolAssignments),
        ("192.0.2.2", Range::Documentation),
        ("198.51.100.7", Range::Documentation),
        ("203.0.113.255", Range::Documentation),
        ("192.31.196.1", Range::As112),
        ("192.175.48.6", Range::As112),
        ("192.52.193.1", Range::Amt),
        ("192.88.99.1", Range::SixToFourRelay),
        ("198.18.0.1", Range::Benchmarking),
        ("198.19.255.255", Range::Benchmarking),
        ("2001:db8::1", Range::Documentation),
        ("3fff::1", Range::Documentation),
        ("2001:2::1", Range::Benchmarking),
        ("2001::1", Range::Teredo),
        ("2001:1::1", Range::ProtocolAssignments),
        ("2001:3::1", Range::Amt),
        ("2001:4:112::1", Range::As112),
        ("2620:4f:8000::1", Range::As112),
        ("2001:10::1", Range::Orchid),
        ("2001:20::1", Range::Orchid),
        ("2002:7f00:1::1", Range::SixToFour),
        ("100::1", Range::Discard),
        ("100:0:0:1::1", Range::DummyPrefix),
        ("64:ff9b:1::1", Range::LocalTranslation),
        ("5f00::1", Range::SegmentRouting),
        // IPv4 inside IPv6: mapped, IPv4-compatible and NAT64's prefix, judged by the IPv4
        // address (the documentation ranges and the rest too).
        ("::ffff:10.0.0.5", Range::Private),
        ("::ffff:169.254.169.254", Range::LinkLocal),
        ("::ffff:127.0.0.1", Range::Loopback),
        ("::ffff:192.0.2.1", Range::Documentation),
        ("64:ff9b::a9fe:a9fe", Range::LinkLocal),
        ("64:ff9b::7f00:1", Range::Loopback),
        ("64:ff9b::203.0.113.9", Range::Documentation),
        ("::127.0.0.1", Range::Loopback),
        ("::169.254.169.254", Range::LinkLocal),
        ("::10.1.2.3", Range::Private),
        ("::198.51.100.1", Range::Documentation),
        // The IPv4-compatible form is deprecated: refused whatever it carries.
        ("::93.184.215.14", Range::Ipv4Compatible),
    ] {
        assert_eq!(
            egress.refused_range(address.parse().unwrap()),
            Some(range),
            "{address}"
        );
    }
    for address in [
        "93.184.215.14",
        "172.32.0.1",
        "100.128.0.1",
        "192.0.3.1",
        "198.51.101.1",
        "203.0.114.1",
        "198.20.0.1",
        "2606:4700::1111",
        "2001:4860::8888",
        "::ffff:93.184.215.14",
        "64:ff9b::93.184.215.14",
    ] {
        assert_eq!(
            egress.refused_range(address.parse().unwrap()),
            None,
            "{address}"
        );
    }
}

#[tokio::test]
async fn this_hosts_own_addresses_are_refused_in_every_form_unless_allowed() {
    let names = Arc::new(Names::default());
    // Public-looking addresses: only being this host's makes them refused.
    names.set_host(&["93.184.215.14", "2606:4700::10"]);
    names.set("me.test", &["2606:4700::10"]);
    let egress = guard("", names.clone());
    for address in [
        "93.184.215.14",
        "::ffff:93.184.215.14",
        "64:ff9b::93.184.215.14",
        "2606:4700::10",
    ] {
        assert_eq!(
            egress.refused_range(address.parse().unwrap()),
            Some(Range::HostAddress),
            "{address}"
        );
    }
    assert_eq!(egress.refused_range("93.184.215.15".parse().unwrap()), None);
    let refused = egress.resolve("me.test").await.unwrap_err();
    assert_eq!(refused.reason(), "host_address");
    assert_eq!(
        refused.to_string(),
        "me.test resolves to 2606:4700::10, one of this host's own addresses, which \
         coordinator.egress_allow_cidrs does not allow"
    );
    // The host's addresses are read at each check: one it no longer has passes.
    names.set_host(&["93.184.215.15"]);
    assert!(egress.resolve("me.test").await.is_ok());
    // An operator may allow them.
    let open = guard("93.184.215.15/32", names.clone());
    assert_eq!(open.refused_range("93.184.215.15".parse().unwrap()), None);
}

#[tokio::test]
async fn a_refusal_names_the_range_and_the_form_that_carried_it() {
    let egress = guard("", Arc::default());
    for (host, text) in [
        (
            "[64:ff9b::7f00:1]",
            "64:ff9b::7f00:1 is the NAT64 form (64:ff9b::/96) of 127.0.0.1, a loopback address",
        ),
        (
            "[::ffff:127.0.0.1]",
            "::ffff:127.0.0.1 is the IPv4-mapped form of 127.0.0.1, a loopback address",
        ),
        (
            "[::a9fe:a9fe]",
            "::a9fe:a9fe is the deprecated IPv4-compatible form of 169.254.169.254, a \
             link-local address (cloud metadata among them)",
        ),
        (
            "[::5db8:d70e]",
            "::5db8:d70e is a deprecated IPv4-compatible IPv6 address (RFC 4291) (of \
             93.184.215.14)",
        ),
        (
            "198.51.100.1",
            "198.51.100.1 is a documentation address (RFC 5737, RFC 3849, RFC 9637)",
        ),
        (
            "[2002:a00:1::]",
            "2002:a00:1:: is a 6to4 address (RFC 3056)",
        ),
    ] {
        let url = url::Url::parse(&format!("http://{host}/hook")).unwrap();
        let refused = egress.check_url(&url).await.unwrap_err();
        assert_eq!(
            refused.to_string(),
            format!("{text}, which coordinator.egress_allow_cidrs does not allow"),
            "{host}"
        );
    }
}

#[test]
fn an_allowed_cidr_lets_its_addresses_through_and_only_those() {
    let egress = guard("10.20.0.0/16, 127.0.0.1", Arc::default());
    assert_eq!(egress.refused_range("10.20.3.4".parse().unwrap()), None);
    assert_eq!(
        egress.refused_range("::ffff:10.20.3.4".parse().unwrap()),
        None
    );
    assert_eq!(egress.refused_range("127.0.0.1".parse().unwrap()), None);
    assert_eq!(
        egress.refused_range("127.0.0.2".parse().unwrap()),
        Some(Range::Loopback)
    );
    assert_eq!(
        egress.refused_range("10.21.0.1".parse().unwrap()),
        Some(Range::Private)
    );
    let bad = Egress::new("10.0.0.0/33", Arc::new(SystemLookup), counter()).unwrap_err();
    assert!(bad.contains("coordinator.egress_allow_cidrs"), "{bad}");
}

#[tokio::test]
async fn a_name_is_refused_when_any_of_its_addresses_is_and_the_refusal_says_which() {
    let names = Arc::new(Names::default());
    names.set("mixed.test", &["93.184.215.14", "10.0.0.5"]);
    names.set("public.test", &["93.184.215.14"]);
    let egress = guard("", names.clone());
    let refused = egress.resolve("mixed.test").await.unwrap_err();
    assert_eq!(refused.reason(), "private");
    let text = refused.to_string();
    assert!(
        text.contains("mixed.test") && text.contains("10.0.0.5"),
        "{text}"
    );
    assert!(egress.resolve("public.test").await.is_ok());
    let unknown = egress.resolve("nowhere.test").await.unwrap_err();
    assert_eq!(unknown.reason(), "unresolved");
    // An address in the URL is checked as it is, in either notation.
    for host in ["169.254.169.254", "[::ffff:a9fe:a9fe]"] {
        let url = url::Url::parse(&format!("http://{host}/latest/meta-data")).unwrap();
        let refused = egress.check_url(&url).await.unwrap_err();
        assert_eq!(refused.reason(), "link_local", "{host}");
    }
    assert_eq!(egress.refused.with_label_values(&["link_local"]).get(), 2);
}

/// A receiver on loopback that counts what reaches it; `redirect_to`: it answers 302 there.
async fn receiver(redirect_to: Option<String>) -> (u16, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let app = axum::Router::new().fallback(move || {
        let (counted, redirect_to) = (counted.clone(), redirect_to.clone());
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            match redirect_to {
                Some(to) => axum::response::Redirect::temporary(&to).into_response(),
                None => "ok".into_response(),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, hits)
}

use axum::response::IntoResponse;

#[tokio::test]
async fn the_client_connects_only_to_checked_addresses_and_follows_no_redirect() {
    let (port, hits) = receiver(None).await;
    let names = Arc::new(Names::default());
    // A name of the test's own (no DNS has it): reached only through the guard's answer.
    names.set("hooks.test", &["127.0.0.1"]);
    let url = format!("http://hooks.test:{port}/hook");

    // Loopback is not allowed: the call fails before any connection.
    let closed = guard("", names.clone());
    let client = closed
        .client(Duration::from_secs(5), Duration::from_secs(30))
        .unwrap();
    let err = client.post(&url).send().await.unwrap_err();
    let chain = crate::webhooks::error_chain(&err);
    assert!(chain.contains("loopback"), "{chain}");
    assert_eq!(hits.load(Ordering::SeqCst), 0);

    // Allowed by CIDR: the call reaches the address the guard resolved.
    let open = guard("127.0.0.1/32", names.clone());
    let client = open
        .client(Duration::from_secs(5), Duration::from_secs(30))
        .unwrap();
    let answer = client.post(&url).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    // The name now answers an internal address the allowance does not cover (rebinding
    // after the check): refused at the next connection. (A connection kept open from the call
    // above still goes to the address checked then: it is not looked up again.)
    names.set("hooks.test", &["10.0.0.5"]);
    let client = open
        .client(Duration::from_secs(5), Duration::from_secs(30))
        .unwrap();
    let err = client.post(&url).send().await.unwrap_err();
    assert!(crate::webhooks::error_chain(&err).contains("private"));

    // A redirect is an answer, never followed.
    names.set("hooks.test", &["127.0.0.1"]);
    let (elsewhere, elsewhere_hits) = receiver(None).await;
    let (redirecting, _) = receiver(Some(format!("http://127.0.0.1:{elsewhere}/"))).await;
    let answer = client
        .post(format!("http://hooks.test:{redirecting}/hook"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 307);
    assert_eq!(elsewhere_hits.load(Ordering::SeqCst), 0);
}
