//! The database going away under play (PostgreSQL behind a fault proxy):
//! restarted, cut mid-commit, blackholed, or gone for one node only.
//! Nothing acknowledged is lost, no seq is written twice, every client is
//! answered or closed with a reconnect hint, and play resumes by itself.

#[path = "../../examples/support/proxy.rs"]
mod proxy;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use proxy::{FaultProxy, Mode};

/// An echo server on a thread of its own: answers its address.
fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 1024];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 || stream.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A client of the proxy whose reads give up after `wait`.
fn client(proxy: &FaultProxy, wait: Duration) -> TcpStream {
    let s = TcpStream::connect(proxy.addr()).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    s
}

/// What one read answers: bytes, end of stream (empty), or a timeout.
fn read_some(s: &mut TcpStream) -> Result<Vec<u8>, std::io::ErrorKind> {
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(n) => Ok(buf[..n].to_vec()),
        Err(e) => Err(e.kind()),
    }
}

fn timed_out(r: &Result<Vec<u8>, std::io::ErrorKind>) -> bool {
    matches!(
        r,
        Err(std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
    )
}

/// Closed: end of stream, or a reset.
fn closed(r: &Result<Vec<u8>, std::io::ErrorKind>) -> bool {
    matches!(r, Ok(b) if b.is_empty()) || matches!(r, Err(k) if !timed_out(&Err(*k)))
}

#[test]
fn the_fault_proxy_passes_holds_refuses_and_cuts() {
    let proxy = FaultProxy::start(echo_server()).unwrap();
    let long = Duration::from_secs(10);

    // Pass: bytes go through both ways.
    let mut a = client(&proxy, long);
    a.write_all(b"ping").unwrap();
    assert_eq!(read_some(&mut a), Ok(b"ping".to_vec()), "pass echoes");

    // Hold: an open and a new connection both get nothing back...
    proxy.set(Mode::Hold);
    let mut b = client(&proxy, Duration::from_millis(300));
    a.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    a.write_all(b"held-a").unwrap();
    b.write_all(b"held-b").unwrap();
    assert!(timed_out(&read_some(&mut a)), "hold forwards nothing");
    assert!(timed_out(&read_some(&mut b)), "hold forwards nothing new");

    // ...and on Pass the held bytes flow, as after a healed partition.
    proxy.set(Mode::Pass);
    a.set_read_timeout(Some(long)).unwrap();
    b.set_read_timeout(Some(long)).unwrap();
    assert_eq!(read_some(&mut a), Ok(b"held-a".to_vec()), "held bytes flow");
    assert_eq!(read_some(&mut b), Ok(b"held-b".to_vec()), "held bytes flow");

    // Cut: open connections close, new ones pass.
    proxy.cut();
    assert!(closed(&read_some(&mut a)), "a cut closes a");
    assert!(closed(&read_some(&mut b)), "a cut closes b");
    let mut c = client(&proxy, long);
    c.write_all(b"after").unwrap();
    assert_eq!(read_some(&mut c), Ok(b"after".to_vec()), "pass after a cut");

    // Refuse: open and new connections close at once.
    proxy.set(Mode::Refuse);
    assert!(closed(&read_some(&mut c)), "refuse closes what is open");
    let mut d = client(&proxy, long);
    assert!(closed(&read_some(&mut d)), "refuse closes what comes");
    proxy.set(Mode::Pass);
    let mut e = client(&proxy, long);
    e.write_all(b"back").unwrap();
    assert_eq!(read_some(&mut e), Ok(b"back".to_vec()), "pass after refuse");

    // Dropped: the proxy stops and its connections close.
    drop(proxy);
    assert!(closed(&read_some(&mut e)), "a dropped proxy closes");
}
