//! The fast ("VIP") port (RocketMQ's `fastListenPort`, at `listenPort - 2` by default): where
//! clients with `vipChannelEnabled` (`MixAll.brokerVIPChannel`: the dashboard, Java clients up
//! to 4.4) send their broker calls. It serves the broker port's processors over the same store,
//! behind the same ACL; a port that is in use at start costs a warning, not the broker.

use super::*;

/// A loopback port `p` whose `p - 2` was free a moment ago, as `p` itself.
fn port_with_free_fast_port() -> u16 {
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let p = l.local_addr().expect("its address").port();
        if p > 1026 && std::net::TcpListener::bind(("127.0.0.1", p - 2)).is_ok() {
            return p;
        }
    }
}

/// A broker on `listenPort` with the fast port at its default, `listenPort - 2`, bound
/// (ports found free can be taken by another test before the broker binds them: then again).
async fn broker_with_fast_port(tweak: impl Fn(&mut BrokerConfig)) -> RunningBroker {
    for _ in 0..20 {
        let port = port_with_free_fast_port();
        let config = {
            let mut c = common::broker::loopback();
            common::broker::with_fast_port(&mut c);
            c.remoting.listen.set_port(port);
            tweak(&mut c);
            c
        };
        let Ok(broker) = baiji::broker::start(config).await else { continue };
        if broker.fast_addr().is_some() {
            return broker;
        }
        broker.shutdown().await;
    }
    panic!("no broker port with a free port 2 below it in 20 tries")
}

#[tokio::test]
async fn given_the_default_fast_port_when_clients_call_it_should_serve_the_broker_port_requests() {
    let broker = start_fast().await;
    let main = broker_addr(&broker);
    let fast = broker.fast_addr().expect("the fast port is bound");
    assert_eq!(
        (fast.ip(), fast.port()),
        (main.ip(), main.port() - 2),
        "RocketMQ's fastListenPort: listenPort - 2, where MixAll.brokerVIPChannel sends"
    );
    let mut vip = Conn::open(fast).await;
    let r = vip.call(create_topic_request("FastTopic", 2)).await;
    assert_eq!(r.code, code::SUCCESS, "an admin code is served on the fast port: {r:?}");
    let r = vip.call(send_request("FastTopic", 1, &b"over the fast port"[..])).await;
    assert_eq!(r.code, code::SUCCESS, "a send is served on the fast port: {r:?}");
    assert_eq!(r.ext_fields.get("queueOffset"), Some("0"), "the first message of queue 1: {r:?}");
    // The same store behind both ports: the broker port sees what the fast port stored.
    let mut plain = Conn::open(main).await;
    let r = plain.call(max_offset_request("FastTopic", 1)).await;
    assert_eq!(r.ext_fields.get("offset"), Some("1"), "one message in queue 1: {r:?}");
    let r = plain.call(send_request("FastTopic", 1, &b"over the broker port"[..])).await;
    assert_eq!(r.code, code::SUCCESS, "{r:?}");
    let r = vip.call(max_offset_request("FastTopic", 1)).await;
    assert_eq!(r.ext_fields.get("offset"), Some("2"), "the fast port sees it too: {r:?}");
    let r = vip.call(request(-77, ExtFields::new())).await;
    assert_eq!(r.code, code::REQUEST_CODE_NOT_SUPPORTED, "the broker's code table: {r:?}");
    broker.shutdown().await;
}

async fn start_fast() -> RunningBroker {
    broker_with_fast_port(|_| {}).await
}

#[tokio::test]
async fn given_an_acl_file_when_an_unsigned_request_reaches_the_fast_port_should_refuse_it() {
    let dir = std::env::temp_dir().join(format!("baiji-fast-acl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join("plain_acl.yml");
    std::fs::write(
        &path,
        "accounts:\n  - accessKey: fastak\n    secretKey: fastsecret\n    admin: true\n",
    )
    .expect("the ACL file is written");
    let broker = broker_with_fast_port(|c| c.security.acl_file = Some(path.clone())).await;
    let mut vip = Conn::open(broker.fast_addr().expect("a fast port")).await;
    let r = vip.call(send_request("AnyTopic", 0, &b"unsigned"[..])).await;
    assert_eq!(r.code, code::NO_PERMISSION, "the fast port checks the ACL too: {r:?}");
    assert_eq!(broker.acl_refused(), 1, "counted as the broker port's refusals are");
    broker.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn given_listen_port_minus_2_in_use_when_the_broker_starts_should_start_without_a_fast_port()
{
    // Hold a port, then start a broker 2 above it (until such a port is free).
    let (taken, broker) = loop {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let q = taken.local_addr().expect("its address").port();
        let Some(p) = q.checked_add(2) else { continue };
        let mut c = common::broker::loopback();
        common::broker::with_fast_port(&mut c);
        c.remoting.listen.set_port(p);
        if let Ok(b) = baiji::broker::start(c).await {
            break (taken, b);
        }
    };
    assert_eq!(broker.fast_addr(), None, "the port in use is left to its owner: a warning only");
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let r = conn.call(create_topic_request("NoFastTopic", 1)).await;
    assert_eq!(r.code, code::SUCCESS, "the broker port is served: {r:?}");
    // The holder still owns its port: a connection to it is the holder's to accept.
    let addr = taken.local_addr().expect("its address");
    let _client = std::net::TcpStream::connect(addr).expect("the holder's port accepts");
    let (_, from) = taken.accept().expect("the holder accepts the connection");
    assert!(from.ip().is_loopback());
    broker.shutdown().await;
}

#[tokio::test]
async fn given_fast_listen_port_0_or_a_port_when_the_broker_starts_should_disable_or_move_it() {
    let mut c = common::broker::loopback();
    c.remoting.fast_listen_port = Some(0);
    let broker = baiji::broker::start(c).await.expect("the broker starts");
    assert_eq!(broker.fast_addr(), None, "0 turns the fast port off");
    broker.shutdown().await;

    let broker = loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let p = l.local_addr().expect("its address").port();
        drop(l);
        let mut c = common::broker::loopback();
        c.remoting.fast_listen_port = Some(p);
        let b = baiji::broker::start(c).await.expect("the broker starts");
        if b.fast_addr().is_some() {
            assert_eq!(b.fast_addr().map(|a| a.port()), Some(p), "the port asked for");
            break b;
        }
        b.shutdown().await;
    };
    let mut vip = Conn::open(broker.fast_addr().expect("the fast port")).await;
    let r = vip.call(create_topic_request("MovedFastTopic", 1)).await;
    assert_eq!(r.code, code::SUCCESS, "served on the port asked for: {r:?}");
    broker.shutdown().await;
}

/// `fastListenPort` of a GET_BROKER_CONFIG answer asked on the broker port.
async fn reported_fast_port(broker: &RunningBroker) -> String {
    let mut conn = Conn::open(broker_addr(broker)).await;
    let r = conn.call(request(rc::GET_BROKER_CONFIG, ExtFields::new())).await;
    assert_eq!(r.code, code::SUCCESS, "the config is answered: {r:?}");
    let text = String::from_utf8(r.body.to_vec()).expect("a UTF-8 properties text");
    text.lines()
        .find_map(|l| l.strip_prefix("fastListenPort="))
        .unwrap_or_else(|| panic!("fastListenPort is reported: {text}"))
        .to_string()
}

#[tokio::test]
async fn given_the_fast_port_on_or_off_when_asked_for_the_broker_config_should_report_it() {
    let broker = start_broker(|_| {}).await;
    let fast = broker.fast_addr().map(|a| a.port().to_string()).unwrap_or_default();
    assert_eq!(reported_fast_port(&broker).await, fast, "the port the fast listener has");
    broker.shutdown().await;
    let broker = start_broker(|c| c.remoting.fast_listen_port = Some(0)).await;
    assert_eq!(reported_fast_port(&broker).await, "", "off: empty");
    broker.shutdown().await;
}
